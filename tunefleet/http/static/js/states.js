// The lifecycles' states as the API spells them, in the order of tunefleet/fsm (JobState,
// WorkerState, TERMINAL_JOB_STATES). tests/ui/test_ui_states.py holds these lists to the
// enums and keeps other modules from writing their own: change them together.

export const JOB_STATES = ['pending_approval', 'pending', 'dispatched', 'running', 'completed', 'failed', 'cancelled'];
export const TERMINAL_JOB_STATES = new Set(['completed', 'failed', 'cancelled']);
export const ACTIVE_JOB_STATES = JOB_STATES.filter((s) => !TERMINAL_JOB_STATES.has(s));
export const WORKER_STATES = ['connecting', 'idle', 'busy', 'draining', 'offline'];

/** 'pending' → 'Pending', 'pending_approval' → 'Pending approval', as filters and
 * counters label a state. */
export function stateLabel(state) {
  return (state[0].toUpperCase() + state.slice(1)).replace(/_/g, ' ');
}
