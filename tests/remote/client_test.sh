#!/usr/bin/env bash
# Runs the S3 client's tests (s3_client_test.cpp) against a real SeaweedFS server on loopback.
#   client_test.sh TEST_BINARY WORK_DIR [CATCH_FILTER]
set -uo pipefail
binary="$1"; work="$2"; filter="${3:-~[gpu]}"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/s3_server.sh"
s3_test_setup "$work" frugal-client
FRUGAL_TEST_S3_BUCKET=frugal-client "$binary" --warn NoTests "$filter"
