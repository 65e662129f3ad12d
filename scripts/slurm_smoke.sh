#!/usr/bin/env bash
# Slurm smoke test on one CPU machine (Debian/Ubuntu, as root): installs and starts a one-node Slurm with
# accounting (munge, mariadb, slurmdbd, slurmctld, slurmd), then runs a 4-point sweep through
# hydra/launcher=slurm on the CPU interpreter, cancels one of its jobs, and checks:
#   - the cancelled job (cancelled while it runs) is one "not recorded" line naming its Slurm job id, the summary still prints (3 rows),
#     and the exit status is 4 (points lost);
#   - a rerun of the same command completes the sweep: exit 0, "4 rows (3 already on disk, 1 new".
# docs/scaling.md ("A smoke test on one machine") explains each step. Usage: bash scripts/slurm_smoke.sh
# Logs: $SMOKE_DIR (default /tmp/flash-bwd-slurm-smoke). Leaves the daemons running.
#   bash scripts/slurm_smoke.sh up     # only start Slurm;   bash scripts/slurm_smoke.sh stop   # stop its daemons
set -euo pipefail
cd "$(dirname "$0")/.."
SMOKE_DIR=${SMOKE_DIR:-/tmp/flash-bwd-slurm-smoke}
NODE=$(hostname -s)

stop() {
    for d in slurmd slurmctld slurmdbd; do  # by the pid each daemon wrote
        [[ -s /run/$d.pid ]] && kill "$(cat /run/$d.pid)" 2>/dev/null || true
    done
}
if [[ "${1:-}" == "stop" ]]; then stop; exit 0; fi
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || fail "run as root (installs packages and starts daemons)"

# ---- 1. packages ---------------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurmdbd munge mariadb-server >/dev/null
fi
mkdir -p "$SMOKE_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /run/mysqld

# ---- 2. munge (authentication between the daemons) -----------------------------------------------------
[[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key /run/munge && chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged

# ---- 3. accounting: mariadb + slurmdbd (sacct is how submitit learns a job's end state) -----------------
chown mysql:mysql /run/mysqld
if ! mysqladmin ping --silent >/dev/null 2>&1; then
    (mysqld_safe >"$SMOKE_DIR/mysqld.log" 2>&1 &)
    for _ in $(seq 60); do mysqladmin ping --silent >/dev/null 2>&1 && break; sleep 1; done
fi
mysqladmin ping --silent >/dev/null 2>&1 || fail "mariadb did not start ($SMOKE_DIR/mysqld.log)"
mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'smoke';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
cat >/etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=smoke
StorageLoc=slurm_acct_db
LogFile=$SMOKE_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF
chmod 600 /etc/slurm/slurmdbd.conf
pgrep -x slurmdbd >/dev/null || slurmdbd
for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done

# ---- 4. slurmctld + slurmd: one node, one partition, every CPU -------------------------------------------
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=smoke
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$SMOKE_DIR/slurmctld.log
SlurmdLogFile=$SMOKE_DIR/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$NODE CPUs=$(nproc) RealMemory=$MEM_MB State=UNKNOWN
PartitionName=smoke Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
sacctmgr -i add cluster smoke >/dev/null 2>&1 || true
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break; sleep 1; done
sinfo -h -o %t | grep -qE '^(idle|mix|alloc)' || fail "the node did not come up ($SMOKE_DIR/slurmctld.log, slurmd.log)"
echo "slurm up: $(sinfo -h -o '%P %D %t %c CPUs')"
[[ "${1:-}" == "up" ]] && exit 0  # `up`: start Slurm only

# ---- 5. a 4-point sweep through the Slurm launcher, one job cancelled -----------------------------------
RESULTS="$SMOKE_DIR/results"
rm -rf "$RESULTS" multirun/slurm-smoke
SWEEP=(python -m runners.sweep -m hydra/launcher=slurm hydra.launcher.gpus_per_node=null
       hydra.launcher.cpus_per_task=1 hydra.launcher.mem_gb=1 hydra.launcher.timeout_min=10
       hydra.launcher.array_parallelism=1 sweep_id=slurm-smoke "results_dir=$RESULTS"
       seq=64 batch=1 heads=1 head_dim=16 dtype=fp16 variant=two_pass,sdpa_flash causal=true,false)

set +e
"${SWEEP[@]}" >"$SMOKE_DIR/run1.out" 2>"$SMOKE_DIR/run1.err" &
pid=$!
victim=""
# the array's last task, once it runs (array_parallelism=1: it starts last). The wait ends on the sweep's own
# state, task _3 running or the sweep over, never on a fixed time: a busy machine only starts _3 later.
while kill -0 "$pid" 2>/dev/null; do
    victim=$(squeue -h -r -t running -o %i -n flash-bwd 2>/dev/null | grep -E '_3$' | head -1)
    [[ -n "$victim" ]] && break
    sleep 0.2
done
[[ -n "$victim" ]] && scancel "$victim"
wait $pid
code=$?
set -e
echo "run 1 (job $victim cancelled): exit $code"
cat "$SMOKE_DIR/run1.out" "$SMOKE_DIR/run1.err"
[[ -n "$victim" ]] || fail "array task _3 was never seen running before the sweep ended, so not cancelled"
[[ $code == 4 ]] || fail "run 1 exit status $code, expected 4 (points not recorded)"
grep -q "point not recorded: Slurm job $victim CANCELLED" "$SMOKE_DIR/run1.err" \
    || fail "run 1 does not report the cancelled job $victim in one line"
grep -q "1 of 4 points not recorded" "$SMOKE_DIR/run1.err" || fail "run 1 has no '1 of 4 points not recorded' line"
grep -q "sweep slurm-smoke: 3 rows" "$SMOKE_DIR/run1.out" || fail "run 1's summary does not count 3 rows"
! grep -q "Traceback" "$SMOKE_DIR/run1.err" || fail "run 1 printed a traceback"

# ---- 6. the rerun completes the sweep ---------------------------------------------------------------------
set +e
"${SWEEP[@]}" >"$SMOKE_DIR/run2.out" 2>"$SMOKE_DIR/run2.err"
code=$?
set -e
echo "run 2: exit $code"
cat "$SMOKE_DIR/run2.out" "$SMOKE_DIR/run2.err"
[[ $code == 0 ]] || fail "run 2 exit status $code, expected 0"
grep -q "sweep slurm-smoke: 4 rows (3 already on disk, 1 new" "$SMOKE_DIR/run2.out" \
    || fail "run 2's summary does not say '4 rows (3 already on disk, 1 new'"
echo "SMOKE PASSED: cancelled job $victim reported, exit 4 with the summary; the rerun completed 4 rows"
