"""Where a sweep's fixed time goes: with $FLASH_BWD_PHASE_LOG set, every process of a run (the sweep process, the
launcher's job processes, the isolated workers) appends one JSON line per step to that file: wall time, pid, the
step, seconds since the process started. Unset (the default), `mark` returns at once and writes nothing.

    FLASH_BWD_PHASE_LOG=/tmp/phases.jsonl python -m runners.sweep -m hydra/launcher=local_gpus ...
    python -m runners.phases /tmp/phases.jsonl        # the fixed phases and the point phase of that run

The steps: `cli` (the sweep process reached cli()), `preflight` (every point composed and checked), `launch` (the
launcher hands out jobs), per job process `job` (its first job started), `lease` (its GPU held), `prestart` (its
isolated worker started), per worker `worker` (its process began) and `ready` (its imports done), `point` (a
measurement starts) and `row` (a row written), `done` (the summary printed)."""
import json
import os
import sys
import time

ENV = "FLASH_BWD_PHASE_LOG"


def _process_start() -> float | None:
    """This process's start, as wall time (Linux /proc), else None."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(ln.split()[1]) for ln in f if ln.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def mark(step: str, **fields) -> None:
    """One line in $FLASH_BWD_PHASE_LOG (nothing when unset). A single append of a short line: lines of several
    processes do not interleave."""
    path = os.environ.get(ENV)
    if not path:
        return
    now = time.time()
    start = _process_start()
    line = {"t": round(now, 3), "pid": os.getpid(), "step": step,
            "since_start_s": None if start is None else round(now - start, 2), **fields}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # a measurement aid never fails a run


_once: set = set()


def mark_once(step: str, **fields) -> bool:
    """`mark`, the first time this process reaches `step` only; True that first time. (A job process's task
    function comes pickled by value, with fresh copies of its module's globals per job: this module's set is the
    process's.)"""
    if step in _once:
        return False
    _once.add(step)
    mark(step, **fields)
    return True


def read(path) -> list[dict]:
    lines = []
    with open(path) as f:
        for text in f:
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue
    return sorted(lines, key=lambda r: r["t"])


def summary(records: list[dict], start: float | None = None, end: float | None = None) -> dict:
    """Seconds of each phase of one run, from its records. `start`: the command's start (default: the sweep
    process's start, from its `cli` record); `end`: its exit, when known. Phases: preflight (start -> preflight
    done), launch (-> jobs handed out), to_first_point (-> the first measurement starts: job processes, their
    imports, the worker's start), points (first measurement -> last row), tail (last row -> summary printed), exit
    (-> `end`: the job processes' and workers' shutdown); fixed = all but points. Also the job processes' start
    (job: its own start -> its first job) and the workers' start (worker -> ready), slowest."""
    def first(step):
        return next((r for r in records if r["step"] == step), None)

    def last(step):
        return next((r for r in reversed(records) if r["step"] == step), None)

    cli = first("cli")
    if start is None:
        start = cli["t"] - (cli.get("since_start_s") or 0.0) if cli else records[0]["t"]
    steps = [("preflight", first("preflight")), ("launch", first("launch")), ("to_first_point", first("point")),
             ("points", last("row")), ("tail", last("done"))]
    out, previous = {}, start
    for name, record in steps:
        if record is None:
            out[name] = None
            continue
        out[name] = round(record["t"] - previous, 2)
        previous = record["t"]
    done = last("done")
    out["exit"] = round(end - done["t"], 2) if end is not None and done is not None else None
    known = [v for k, v in out.items() if k != "points" and v is not None]
    out["fixed"] = round(sum(known), 2)
    out["job_start"] = max((r["since_start_s"] for r in records if r["step"] == "job"
                            and r.get("since_start_s") is not None), default=None)
    ready = {r["pid"]: r for r in records if r["step"] == "ready"}
    out["worker_start"] = max((round(ready[r["pid"]]["t"] - r["t"] + (r.get("since_start_s") or 0.0), 2)
                               for r in records if r["step"] == "worker" and r["pid"] in ready), default=None)
    return out


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m runners.phases <phase log>", file=sys.stderr)
        sys.exit(2)
    records = read(argv[0])
    for r in records:
        extra = {k: v for k, v in r.items() if k not in ("t", "pid", "step", "since_start_s")}
        print(f"{r['t'] - records[0]['t']:8.2f} s  pid {r['pid']:>7}  {r['step']:<10} "
              f"(process at {r['since_start_s']} s) {json.dumps(extra) if extra else ''}")
    print(" ".join(f"{k}={v}" for k, v in summary(records).items()))


if __name__ == "__main__":
    main()
