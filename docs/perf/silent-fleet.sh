#!/bin/bash
# A fleet that never heartbeats after a restart (docs/PERFORMANCE.md,
# "session 19"): starts a server on a copy of DATADIR (a data dir a
# `herder bench cluster -data-dir DATADIR -no-restart` run left behind,
# whose simulated nodes are gone) with a short failover window, and
# prints its RSS, CPU and queue gauges every 5 s; stops it after STEPS
# samples, or at once (kill -9) past CAP_MIB resident.
#
#   docs/perf/silent-fleet.sh target/release/herder /tmp/dd-medium 10s 12 4000
set -u
BIN=$1 DATADIR=$2 WINDOW=$3 STEPS=$4 CAP_MIB=$5
PORT=${PORT:-4998}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -a "$DATADIR" "$WORK/data"
printf '[server]\nfailover_heartbeat_ttl = "%s"\n' "$WINDOW" > "$WORK/config.toml"
"$BIN" agent -server -http-port "$PORT" -log-level warn -data-dir "$WORK/data" \
    -config "$WORK/config.toml" > "$WORK/server.log" 2>&1 &
pid=$!
for i in $(seq 1 "$STEPS"); do
  sleep 5
  rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$pid/status" 2>/dev/null)
  cpu=$(awk '{print ($14+$15)/100}' "/proc/$pid/stat" 2>/dev/null)
  gauges=$(curl -s -m 4 "localhost:$PORT/v1/metrics" | python3 -c '
import json, sys
g = {x["Name"]: x["Value"] for x in json.load(sys.stdin)["Gauges"]}
keys = ["broker_total_pending", "broker_total_ready", "blocked_evals_total_blocked",
        "nodes_heartbeating", "state_allocs", "state_index"]
print(" ".join("%s=%d" % (k, g.get("herder_" + k, -1)) for k in keys))' 2>/dev/null)
  echo "t=$((i * 5))s rss=${rss:-?}MiB cpu=${cpu:-?}s $gauges"
  if [ -n "${rss:-}" ] && [ "$rss" -gt "$CAP_MIB" ]; then
    echo "past ${CAP_MIB} MiB: stopped"
    kill -9 "$pid"; wait "$pid" 2>/dev/null; exit 0
  fi
done
kill "$pid"; wait "$pid" 2>/dev/null
