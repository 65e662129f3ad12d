"""The commit a row records: git HEAD, or $FLASH_BWD_COMMIT when set (a `git archive` copy of the tree run inside
another checkout must not take that checkout's HEAD)."""
import json
import os
import subprocess
import sys


def code_version_in_subprocess(env_commit: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FLASH_BWD_COMMIT"}
    if env_commit is not None:
        env["FLASH_BWD_COMMIT"] = env_commit
    code = "import json; from runners.point.env import code_version; print(json.dumps(code_version()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_environment_commit_wins_over_the_checkout():
    version = code_version_in_subprocess("abc1234")
    assert version == {"commit": "abc1234", "dirty": None, "diff_hash": ""}


def test_without_it_the_checkout_head_is_recorded():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    version = code_version_in_subprocess(None)
    assert version["commit"] == (head or "unknown")
