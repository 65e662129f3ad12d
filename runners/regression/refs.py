"""Which commit a baseline names: a sha prefix as typed, or any git ref (HEAD~1, a branch, a tag) that git
resolves. Shared by the measured-rows and the compiled-tables checks."""
import re
import subprocess


def is_commit_like(text: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-fA-F]{4,40}", text))


def resolve_ref(ref: str) -> str | None:
    """Full sha of a git ref (HEAD~1, a branch, a tag), or None when git does not know it."""
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
