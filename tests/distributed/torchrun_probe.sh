# Sourced by the multi-process test scripts: $probe launched on N processes, and checks on what
# every rank printed. Two launchers:
#   launch N ARGS...         torchrun from the pinned wheel ($python), as users launch jobs; its
#                            agent serves the rendezvous store.
#   launch_direct N ARGS...  the ranks started here with torchrun's environment (RANK, WORLD_SIZE,
#                            LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and rank 0 serving the store, as a
#                            Kubernetes PyTorchJob or a hand-written launcher starts them. torchrun's
#                            agent costs a launch about 3 CPU-s and 3-4 s of start-up (it imports
#                            torch), so a script's further launches of one scenario take this path.
fail() { echo "FAIL: $*"; exit 1; }
launch() {  # nprocs, probe args...
  local n="$1"; shift
  timeout 240 "$python" -m torch.distributed.run --standalone --nproc-per-node="$n" --no-python "$probe" "$@" 2>&1
}
launch_direct() {  # nprocs, probe args...: every rank's output, rank by rank; fails as torchrun does
  local n="$1"; shift
  local attempt out rc
  for attempt in 1 2 3; do
    reserve_port || fail "no free port for the ranks' rendezvous"
    out=$(start_ranks "$n" "$reserved_port" "$@"); rc=$?
    exec {reserved_fd}>&-
    grep -qiE "EADDRINUSE|address already in use" <<<"$out" || break  # taken by a program outside the tests: another port
  done
  printf '%s\n' "$out"
  return "$rc"
}
# A port for rank 0's store, held (flock) while the ranks run so that no other launch of the suite
# takes it, below the kernel's ephemeral range (no outgoing connection takes it either) and below
# the S3 tests' servers (12000 and up). Sets reserved_port and reserved_fd.
reserve_port() {
  local dir="${TMPDIR:-/tmp}/frugal-rank-ports" port try
  mkdir -p "$dir"
  for try in $(seq 1 100); do
    port=$((5000 + RANDOM % 7000))
    exec {reserved_fd}>"$dir/$port.lock"
    if flock -n "$reserved_fd" && "$python" -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null; then
      reserved_port=$port
      return 0
    fi
    exec {reserved_fd}>&-
  done
  return 1
}
start_ranks() {  # nprocs port probe args...
  local n="$1" port="$2"; shift 2
  local logs rank pid rc=0 status
  logs="$(mktemp -d)"
  local -a pids=()
  for ((rank = 0; rank < n; rank++)); do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 240 "$probe" "$@" > "$logs/$rank" 2>&1 &
    pids+=("$!")
  done
  # As torchrun's agent does: the first rank to fail stops the others, and its status is the launch's.
  # (Each rank is waited for by its pid once it has ended: `wait -n` with pids fails, "no such job",
  # on a pid an earlier `wait -n` already reported.)
  local -a pending=("${pids[@]}") running
  while [ "${#pending[@]}" -gt 0 ]; do
    running=()
    for pid in "${pending[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then running+=("$pid"); continue; fi
      wait "$pid"; status=$?
      if [ "$status" -ne 0 ] && [ "$rc" -eq 0 ]; then
        rc=$status
        kill -TERM "${pids[@]}" 2>/dev/null
      fi
    done
    pending=("${running[@]}")
    [ "${#pending[@]}" -eq 0 ] || sleep 0.1
  done
  for ((rank = 0; rank < n; rank++)); do cat "$logs/$rank"; done
  rm -rf "$logs"
  return "$rc"
}
expect_all() {  # output, nprocs, pattern: every rank printed the pattern
  [ "$(echo "$1" | grep -c "$3")" -eq "$2" ] || fail "not every one of $2 ranks printed '$3': $1"
}
