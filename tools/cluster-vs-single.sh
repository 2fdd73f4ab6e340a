#!/usr/bin/env bash
# The same load generator against a 3-server cluster and against a single
# server, one after the other (issue 18's comparison; docs/PERFORMANCE.md).
#
# usage: tools/cluster-vs-single.sh [OUT_DIR]
#   HERDER   the binary (default target/release/herder; build it with
#            `cargo build --release -p herder-cli`)
#   PRESET   `herder bench cluster` preset (default ci)
# Prints both JSON reports' placement rate and eval latency, and leaves the
# reports, the servers' logs and data dirs in OUT_DIR.
set -u
bin=${HERDER:-$(pwd)/target/release/herder}
out=${1:-$(mktemp -d)}
mkdir -p "$out" && cd "$out" || exit 1
rm -rf d1 d2 d3
key=$(head -c16 /dev/urandom | base64)
pids=()
for i in 1 2 3; do
  "$bin" agent -server -bootstrap-expect 3 \
    -retry-join 127.0.0.1:19641 -retry-join 127.0.0.1:19642 -retry-join 127.0.0.1:19643 \
    -rpc-port 1964$i -http-port 1965$i -bind 127.0.0.1 -data-dir d$i -encrypt "$key" \
    -node s$i -log-level warn >log$i 2>&1 &
  pids+=($!)
done
stop() { kill -INT "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; }
trap stop EXIT
leader=""
for _ in $(seq 1 60); do
  leader=$(curl -s localhost:19651/v1/status/leader | tr -d '"')
  [ -n "$leader" ] && break
  sleep 0.5
done
[ -n "$leader" ] || { echo "no leader after 30 s; see $out/log*"; exit 1; }
http_port=$(( ${leader##*:} + 10 ))   # the RPC ports 1964x serve HTTP on 1965x
echo "leader $leader (HTTP port $http_port)"
"$bin" bench cluster -preset "${PRESET:-ci}" -address "127.0.0.1:$http_port" -json >three.json 2>three.err
stop
trap - EXIT
"$bin" bench cluster -preset "${PRESET:-ci}" -no-restart -json >single.json 2>single.err
python3 - three.json single.json <<'PY'
import json, sys
for name in sys.argv[1:]:
    try:
        r = json.load(open(name))
    except Exception as e:
        print(f"{name}: unreadable ({e})"); continue
    keys = [k for k in r if any(w in k for w in ("placements_per", "eval_latency", "jobs_per", "partial"))]
    print(name, {k: r[k] for k in keys})
PY
echo "reports and logs in $out"
