"""The wire protocol: shapes and words that must stay compatible with SimpleTuner's agent."""
