"""Takes the screenshots in docs/ui.md: a real orchestrator and agents, plus GPU workers
simulated over the worker protocol (this machine may have no GPU), seen in headless Chromium.

    PYTHONPATH=. .venv/bin/python -m tests.ui.docs_screenshots [--out docs/images]

Not a test (pytest does not collect it). The PNGs are reduced to a 256-colour palette.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from PIL import Image
from playwright.sync_api import Page, sync_playwright

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config
from tests.ui.browser_support import CHROMIUM_ARGS, chromium_path, sign_in

SIMULATED = [
    # name, GPU, VRAM per GPU, count, labels, utilisation per GPU
    ("gpu-a100-01", "NVIDIA A100-SXM4-80GB", 79.2, 8, {"gpu_type": "a100", "zone": "eu-west"}, 0),
    ("gpu-h100-02", "NVIDIA H100 80GB HBM3", 79.6, 4, {"gpu_type": "h100", "zone": "us-east"}, 0),
    ("gpu-l4-03", "NVIDIA L4", 22.5, 1, {"gpu_type": "l4", "zone": "eu-west"}, 0),
    ("spot-a10-04", "NVIDIA A10", 22.5, 2, {"gpu_type": "a10", "spot": "true"}, 0),
]
UTILISATION = {
    "gpu-a100-01": [97, 95, 98, 96, 12, 8, 0, 0],
    "gpu-h100-02": [64, 71, 58, 66],
    "gpu-l4-03": [3],
    "spot-a10-04": [0, 0],
}


def worker_call(orch: Orchestrator, token: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        orch.url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"X-Worker-Token": token, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def simulate_gpu_workers(orch: Orchestrator) -> dict[str, str]:
    ids = {}
    for name, gpu, vram, count, labels, _ in SIMULATED:
        created = orch.create_worker(name, labels=labels)
        token, worker_id = created["token"], created["worker_id"]
        gpu_info = {"name": gpu, "vram_gb": vram, "count": count, "accelerator": "cuda"}
        worker_call(
            orch,
            token,
            "/api/workers/register",
            {
                "name": name,
                "gpu_info": gpu_info,
                "persistent": True,
                "hostname": name,
            },
        )
        util = UTILISATION[name]
        worker_call(
            orch,
            token,
            "/api/workers/heartbeat",
            {
                "worker_id": worker_id,
                "status": "idle",
                "gpu_utilization": util,
                "vram_used_gb": [round(vram * u / 100, 1) for u in util],
            },
        )
        ids[name] = worker_id
    orch.request("POST", f"/api/admin/workers/{ids['spot-a10-04']}/drain")
    return ids


def shrink(path: Path) -> None:
    """A 256-colour palette PNG: UI screenshots have few colours, so this loses little."""
    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    palette.save(path, optimize=True)


def shot(page: Page, out: Path, name: str, height: int | None = None) -> None:
    """The viewport, or the top `height` pixels of the whole page."""
    time.sleep(0.4)  # let the last animation frame settle
    path = out / f"ui-{name}.png"
    if height is None:
        page.screenshot(path=str(path))
    else:
        width = page.viewport_size["width"] if page.viewport_size else 1280
        clip = {"x": 0, "y": 0, "width": width, "height": height}
        page.screenshot(path=str(path), full_page=True, clip=clip)
    shrink(path)
    print(f"{path} {path.stat().st_size // 1024} KiB")


def take(out: Path, work: Path) -> None:
    configs = work / "configs"
    write_tiny_config(configs, "sdxl-lora-portraits", max_train_steps=400, step_seconds=0.05)
    write_tiny_config(configs, "flux-dreambooth", max_train_steps=40, step_seconds=0.02)
    write_tiny_config(
        configs, "sd3-finetune", max_train_steps=60, step_seconds=0.02, fail_at_step=35
    )
    orch = Orchestrator(work / "data", configs, heartbeat_timeout_s=600.0).start()
    agents: list[Agent] = []
    try:
        simulate_gpu_workers(orch)
        for name in ("cpu-runner-01", "cpu-runner-02"):
            created = orch.create_worker(name, labels={"pool": "cpu", "zone": "eu-west"})
            agent = Agent(orch.url, created["token"], work / name, name, persistent=True)
            agents.append(agent.start())
            orch.wait_worker(created["worker_id"], "idle")
        cpu = {"pool": "cpu"}
        done = orch.submit(config_name="flux-dreambooth", target="worker", worker_labels=cpu)
        failed = orch.submit(
            config_name="sd3-finetune", target="worker", worker_labels=cpu, max_retries=0
        )
        orch.wait_job(done["job_id"], {"completed"})
        orch.wait_job(failed["job_id"], {"failed"})
        orch.submit(config_name="flux-dreambooth", name="flux-8gpu", target="worker", gpu_count=16)
        cancelled = orch.submit(
            config_name="flux-dreambooth", name="flux-old", worker_labels={"team": "x"}
        )
        orch.request("POST", f"/api/queue/{cancelled['job_id']}/cancel", {"reason": "superseded"})
        running = orch.submit(
            config_name="sdxl-lora-portraits", target="worker", worker_labels=cpu, priority=10
        )
        orch.wait_job(running["job_id"], {"running"})

        executable = chromium_path()
        if executable is None:
            raise SystemExit("no Chromium: apt-get install chromium")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(orch.url + "/")
            page.get_by_label("API token").fill("tf_…")
            shot(page, out, "signin")
            sign_in(page, orch)
            page.locator("#workers-table tbody tr").nth(5).wait_for()
            shot(page, out, "workers")

            page.get_by_role("button", name="+ Create worker", exact=True).click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_label("Name").fill("gpu-a100-05")
            dialog.get_by_role("button", name="+ Add label").click()
            dialog.get_by_label("label 1 key").fill("gpu_type")
            dialog.get_by_label("label 1 value").fill("a100")
            dialog.get_by_role("button", name="Create worker").click()
            dialog.get_by_label("Worker token", exact=True).wait_for()
            shot(page, out, "create-worker")
            dialog.get_by_role("button", name="Done").click()

            page.goto(orch.url + "/#/queue")
            page.get_by_role("button", name="+ Submit job").click()
            form = page.get_by_role("form", name="Submit a job")
            form.get_by_label("Configuration").select_option("sdxl-lora-portraits")
            form.get_by_label("GPU count").fill("2")
            form.get_by_label("Min VRAM per GPU (GB)").fill("40")
            form.get_by_role("button", name="+ Add label requirement").click()
            form.get_by_label("label requirement 1 key").fill("zone")
            form.get_by_label("label requirement 1 glob").fill("eu-*")
            page.locator("#jobs-table tbody tr").nth(4).wait_for()
            shot(page, out, "queue", height=1180)

            page.goto(orch.url + f"/#/jobs/{running['job_id']}")
            wait_until(lambda: page.locator("#job-log .ln").count() >= 12, 30, 0.2, "log lines")
            shot(page, out, "job", height=1200)

            page.goto(orch.url + f"/#/jobs/{failed['job_id']}")
            page.locator("#job-log .end").wait_for()
            shot(page, out, "job-failed", height=900)

            page.goto(orch.url + "/#/audit")
            page.locator("#audit-table tbody tr").nth(5).wait_for()
            shot(page, out, "audit")

            phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
            sign_in(phone, orch)
            phone.locator("#workers-table tbody tr").nth(3).wait_for()
            shot(phone, out, "phone")

            dark = browser.new_page(viewport={"width": 1280, "height": 800}, color_scheme="dark")
            sign_in(dark, orch, route=f"#/jobs/{running['job_id']}")
            wait_until(lambda: dark.locator("#job-log .ln").count() >= 5, 30, 0.2, "log lines")
            shot(dark, out, "dark")
            browser.close()
    finally:
        for agent in agents:
            agent.stop()
        orch.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tunefleet-shots-") as work:
        take(args.out, Path(work))


if __name__ == "__main__":
    main()
