#!/usr/bin/env bash
# median_runs.sh: runs the whole benchmark N times (default 3) and writes, per case, the run
# whose ratio is the median of the N, to OUT; the machines are shared and noisy, so one run's
# medians still move between runs.
# usage: bench/median_runs.sh [N] [OUT]   (from the repository root; OUT: build-bench/results.jsonl)
# The LuaJIT cases run too when build-bench-jit holds their build (`make bench-median` makes it
# whenever luajit is installed).
set -euo pipefail
runs=${1:-3}
results=${2:-build-bench/results.jsonl}
mkdir -p "$(dirname "$results")"
tmp=$(mktemp -d)
for i in $(seq 1 "$runs"); do
  build-bench/bench/core_bench --json "$tmp/run$i.jsonl" > /dev/null
  LUA_CPATH="build-bench/lua/?.so" lua5.4 bench/lua/run.lua --json "$tmp/run$i.jsonl" > /dev/null
  build-bench/bench/mixed_host --json "$tmp/run$i.jsonl" > /dev/null
  if [ -x build-bench-jit/bench/mixed_host ] && command -v luajit > /dev/null 2>&1; then
    LUA_CPATH="build-bench-jit/lua/?.so" luajit bench/lua/jit_bench.lua --json "$tmp/run$i.jsonl" > /dev/null
    build-bench-jit/bench/mixed_host --case jit_mixed_frame --json "$tmp/run$i.jsonl" > /dev/null
  fi
done
lua5.4 - "$tmp" "$runs" > "$results" <<'LUA'
local dir, runs = arg[1], tonumber(arg[2])
local order, by = {}, {}
for i = 1, runs do
  for line in io.lines(dir .. "/run" .. i .. ".jsonl") do
    local name = line:match('"case": "([^"]+)"')
    local ratio = tonumber(line:match('"ratio": ([%d%.eE+-]+)'))
    if not by[name] then by[name] = {}; order[#order + 1] = name end
    table.insert(by[name], {ratio = ratio, line = line})
  end
end
for _, name in ipairs(order) do
  local list = by[name]
  table.sort(list, function(a, b) return a.ratio < b.ratio end)
  print(list[(#list + 1) // 2].line)
end
LUA
rm -rf "$tmp"
cat "$results"
