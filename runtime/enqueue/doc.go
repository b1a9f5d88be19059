// Package enqueue turns the calls of one rank into kernel launches: every
// call is a Task; at the end of a group the planner (Build, a pure function
// over a Comm description) asks the tuner how to run each task, splits it
// into per-channel work descriptors (generated.DevWork), orders them so that
// every rank processes the same works in the same order on every channel,
// and packs them into one launch per group (Plan; more only past
// MaxWorksPerLaunch works): collectives in call order, then point-to-point
// operations, whatever their functions, since a kernel runs the works of
// other functions through the device function table. Launcher then runs a plan on a CUDA
// stream: the work FIFO copy when the works do not fit in the kernel
// arguments, the self copies, and the kernel itself.
//
// # Channels
//
// A collective whose tuner choice says n channels runs on channels
// 0..n-1; each channel handles one contiguous part of the buffer
// (chanOffset, chanCount), parts aligned to Granule bytes. For AllGather and
// ReduceScatter the part is of one rank's chunk; Broadcast and AllGather
// count bytes, the reducing collectives elements. Tasks carry bytes and
// the element type whatever the collective; the planner derives the
// device's counts from them in one place.
//
// Point-to-point operations are paired by distance: the work for distance
// d sends to rank+d and receives from rank-d, so that the receiver of every
// send handles it in a work with the same key (d, i, j) — d the distance,
// i the index of the operation among those between the two ranks, j the
// part — on the same channel (P2PChannel). Works of every channel are
// sorted by that key, which is a global order: the lowest pending key can
// always progress, so no set of point-to-point operations deadlocks.
// Each side picks its number of parts from its own size, so a Send and a
// Recv of different sizes may not pair part for part; every work therefore
// carries the whole messages' sizes (chanOffset: the Send's, redOpArg: the
// Recv's), which the device compares with the peer's (devicesrc/sendrecv.h)
// to turn such a mismatch into an error on both ranks.
// Sends and receives to oneself are device-to-device copies.
package enqueue
