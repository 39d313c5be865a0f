# Sourced by the multi-process test scripts: $probe launched on N processes by torchrun from the
# pinned wheel ($python), as users launch jobs, and checks on what every rank printed.
fail() { echo "FAIL: $*"; exit 1; }
launch() {  # nprocs, probe args...
  local n="$1"; shift
  timeout 240 "$python" -m torch.distributed.run --standalone --nproc-per-node="$n" --no-python "$probe" "$@" 2>&1
}
expect_all() {  # output, nprocs, pattern: every rank printed the pattern
  [ "$(echo "$1" | grep -c "$3")" -eq "$2" ] || fail "not every one of $2 ranks printed '$3': $1"
}
