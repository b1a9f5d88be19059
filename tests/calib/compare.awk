# compare.awk: the calibrate step's table (tests/gpu-verify.sh): per size,
# nccl-tests' and ncclperf's NCCL column's out-of-place time, their ratio and
# whether they agree within 5 %, judged on st (bestproc: the lowest of each
# harness's per-process medians over their cycles; median: over every row;
# best: the best row), with medians, spreads and host times beside, then the
# verdict line "# COLL N sizes, K within 5 %; outside: SIZE:RATIO ...".
#
#   awk -v coll=allreduce -v st=bestproc -f compare.awk \
#       COLL-nt-*.txt COLL-np-*.txt COLL-ntcpu.txt
#
# Files: COLL-nt-R.txt are nccl-tests outputs (time: column 6),
# COLL-np-R.txt ncclperf's (column 6 alone, 14 after ncclgo's sweep, whose
# own time is column 6 and is printed as the ncclgo column), each file one
# process; COLL-ntcpu.txt nccl-tests -C 1 (host time per iteration). 0-byte
# rows (nccl-tests' no-ops) are counted and left out.
function sortn(a, n,   i, j, v) {
  for (i = 2; i <= n; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
}
function stat(s, what,   n, a) {
  n = split(s, a, " ")
  if (n == 0) return -1
  sortn(a, n)
  if (what == "spread") return a[1] > 0 ? a[n] / a[1] : 0
  if (what == "best") return a[1]
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# bestproc: the lowest, over the processes (rounds) of one harness, of each
# process median over its cycles ("best process").
function bestproc(h, s,   f, m, b) {
  b = -1
  for (f = 1; f <= nf; f++) if ((h, s, f) in pf) { m = stat(pf[h, s, f]); if (b < 0 || m < b) b = m }
  return b
}
FNR == 1 { isnt = FILENAME ~ /-nt-[0-9]+\.txt$/; iscpu = FILENAME ~ /-ntcpu\.txt$/; nf++ }
iscpu && $1 ~ /^[0-9]+$/ && NF >= 13 { nthost[$1 + 0] = nthost[$1 + 0] " " $6; next }
$1 ~ /^[0-9]+$/ && NF >= 13 {
  s = $1 + 0
  if (s == 0) { zero++; next }
  seen[s] = 1
  if (isnt) { nt[s] = nt[s] " " $6; pf["nt", s, nf] = pf["nt", s, nf] " " $6 }
  else if (NF >= 17) { np[s] = np[s] " " $14; go[s] = go[s] " " $6; hasgo = 1; pf["np", s, nf] = pf["np", s, nf] " " $14; pf["go", s, nf] = pf["go", s, nf] " " $6 }
  else { np[s] = np[s] " " $6; pf["np", s, nf] = pf["np", s, nf] " " $6 }
}
$1 == "#" && $2 ~ /^[0-9]+$/ && $3 == "host" && !isnt && !iscpu { host[$2 + 0] = host[$2 + 0] " " $NF }
END {
  for (s in seen) sz[++ns] = s + 0
  sortn(sz, ns)
  # judged (CAL_STAT): bestproc, the best process of each harness (the lowest of the
  # medians of its processes over their cycles: at small sizes each process of either
  # harness lands in a fast or a slow mode, see docs/PERFORMANCE.md); median, over
  # all rounds x cycles; best, the best cycle. bestproc and median are printed.
  printf "# %s: out-of-place time (us) over rounds x cycles, judged on the %s; ratio = ncclperf / nccl-tests; spread = max / min", coll, st
  printf "%s\n", zero ? sprintf("; %d nccl-tests 0-byte rows (no-ops) left out", zero) : ""
  printf "#%11s %9s %9s %7s %9s %9s %9s %7s %9s %9s %9s %9s", "size(B)", "nt-bestp", "np-bestp", "ratio", "within5%", "nt-med", "np-med", "ratio", "nt-spread", "np-spread", "nt-host", "np-host"
  if (hasgo) printf " %9s %14s", "ncclgo", "ncclgo/tests"
  printf "\n"
  for (k = 1; k <= ns; k++) {
    s = sz[k]; n++
    if (st == "bestproc") { a = bestproc("nt", s); b = bestproc("np", s) } else { a = stat(nt[s], st); b = stat(np[s], st) }
    if (a < 0 || b < 0) {
      ok = "MISSING"; q = 0
    } else {
      q = b / a; ok = (q >= 0.95 && q <= 1.05) ? "yes" : "NO"
    }
    if (ok == "yes") good++; else bad = bad sprintf(" %d:%s", s, a < 0 || b < 0 ? (a < 0 ? "no-nccl-tests-row" : "no-ncclperf-row") : sprintf("%.3f", q))
    ab = bestproc("nt", s); bb = bestproc("np", s); am = stat(nt[s]); bm = stat(np[s])
    printf "%12d %9.2f %9.2f %7.3f %9s %9.2f %9.2f %7.3f %9.2f %9.2f %9.2f %9.2f", s, ab, bb, (ab > 0 ? bb / ab : 0), ok, am, bm, (am > 0 ? bm / am : 0),
      stat(nt[s], "spread"), stat(np[s], "spread"), stat(nthost[s]), stat(host[s])
    if (hasgo) { g = st == "bestproc" ? bestproc("go", s) : stat(go[s], st); printf " %9.2f %14.3f", g, (a > 0 ? g / a : 0) }
    printf "\n"
  }
  printf "# %-13s %d sizes, %d within 5 %%%s\n", coll, n, good, (bad ? "; outside:" bad : "")
}
