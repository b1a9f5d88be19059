// Package hostpath has no API: its tests run ncclgo's whole host path,
// from InitAll to the launches of Group.End, against the counting fake of
// the CUDA driver (internal/fakecuda) and a fake kernel set, in a process
// of its own (the test binary loads no other driver). Nothing runs on a
// device, so what a call costs is what the host spends on it: the figures
// of ncclperf -hosttime without a GPU. BenchmarkGroupAllReduce measures 1,
// 2 and 8 ranks of one process; TestHostCost guards them
// (internal/benchguard). docs/notes/20261201-hostcost.md has the figures.
package hostpath
