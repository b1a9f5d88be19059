// Package bootstrap is ncclgo's bootstrap network: the out-of-band TCP
// network that the ranks of one communicator use, before any GPU transport
// exists, to find each other and to exchange small messages (addresses,
// topology, connection handles). It plays the part of NCCL's bootstrap.cc.
//
// # Roles
//
// One process creates a [Root] with [NewRoot]. The root listens on a TCP
// address and returns a [UniqueID] that carries that address and a random
// 64-bit magic. The id is handed to every rank (in process, or as text through
// [UniqueID.String] and [ParseUniqueID], e.g. on a command line or in an
// environment variable). Every rank calls [Init], which listens on a port of
// its own, checks in with the root and receives the listen address of every
// rank. The root exits once it has answered one complete check-in. From then
// on the ranks talk to each other directly through the returned [*Conn]:
// [Conn.AllGather], [Conn.Barrier], [Conn.Send] and [Conn.Recv].
//
// When one process drives every rank, [NewInProcess] gives the same
// [Network] interface over channels and mutexes, without sockets.
//
// # Wire protocol
//
// Every message is a frame: a 4-byte big-endian payload length followed by
// the payload. Integers are big-endian. The first frame on every connection is
// a hello; a connection whose hello is malformed, too long (more than 4 KiB)
// or carries the wrong magic is closed without an answer and does not affect
// anybody else ([ErrBadMagic]).
//
//	hello      = magic u64 | kind u8 | rank u32 | nranks u32 | token u64 [ | addrlen u16 | addr ]
//	             kind 1 = check-in (rank → root, with the rank's listen
//	             address as "host:port"), kind 2 = peer (rank → rank, no address)
//	             token: the rank's random check-in token; a peer hello must
//	             carry the token the root's table holds for its rank, so a
//	             process that knows only the id cannot speak for a rank
//
// Rank → root, after the hello:
//
//	query      = 'Q'   "who is still missing?" (sent when the rank's own
//	                   timeout expires; the root answers with a status frame)
//
// Root → rank:
//
//	table      = 'T' | n u32 | n × (len u16 | "host:port" | token u64)   one per rank, in rank order
//	status     = 'S' | final u8 | after_ms u64 | nranks u32 | missing u32 | count u32 | count × rank u32
//	             how many ranks have not checked in, and the first of them
//	             (count ≤ 64); final=1 when the root itself timed out and
//	             gives up
//	reject     = 'R' | text  (duplicate rank, rank out of range, nranks mismatch)
//
// The root writes the table to every rank once all nranks have checked in,
// half-closes the connections, and exits when the ranks hang up (or after a
// short grace period).
//
// Rank → rank: each rank dials a peer lazily, the first time it sends to it,
// and uses that connection for its own messages to that peer only (one
// connection per direction, so two ranks dialing each other never race).
// After the hello, every frame is
//
//	message    = class u8 | tag i64 | data
//
// class 0 carries [Conn.Send] messages; class 1 carries the ring steps of
// [Conn.AllGather] and [Conn.Barrier], whose tag is a per-communicator
// collective sequence number; class 2 (empty) says that the sender's
// collective number tag failed (cancelled, timed out, a peer gone): from
// then on every collective of that number or later fails with
// [ErrCollectiveBroken] on every rank, so a leftover block is never taken
// for a later call's. The receiver queues messages by (peer, class, tag);
// TCP keeps the order of messages with the same key, and messages with
// different keys may be received in any order.
//
// # Limits
//
// A connection must send its hello within min(5 s, timeout) or it is
// closed, and at most 64 connections of a root or a rank wait for their
// hello (a new one closes the oldest). The bytes that one peer sent and
// nobody received are bounded by [Options].MaxQueuedBytes (twice the
// message limit by default): past it the peer's connection is dropped and
// receives from it fail with [ErrQueueFull]. A message frame may announce at most [Options].MaxMessageSize
// (default [DefaultMaxMessageSize], at most [MaxMessageSize]) plus its
// header, and its body must follow its length within the timeout; a root
// reply at most what a table of nranks addresses needs. Longer frames are
// refused at the length prefix, before any allocation, and the connection
// is dropped with a warning naming the peer and the length. nranks is at
// most [MaxRanks]. The accept loops survive failed accepts (EMFILE,
// ENFILE, ECONNABORTED, ...) with a backoff and stop only when their
// listener closes.
//
// # Timeouts and cancellation
//
// Every blocking call takes a context and is also bounded by the bootstrap
// timeout ([Options].Timeout, else NCCL_BOOTSTRAP_TIMEOUT in seconds, else
// 120 s). A check-in that times out reports the ranks that never arrived,
// both at the root ([Root.Wait]) and at the ranks that were waiting
// ([TimeoutError], which matches [ErrTimeout] with errors.Is).
// [Conn.Abort] wakes every waiter at once with [ErrAborted]; [Conn.Close]
// closes every socket and waits for every goroutine the Conn started.
//
// # Environment
//
//   - NCCL_COMM_ID="ip:port" (or "[ipv6]:port"): the root's listen address.
//   - NCCL_SOCKET_IFNAME: interfaces to use, NCCL's grammar: a comma-separated
//     list of name prefixes; a leading '^' excludes the listed interfaces, a
//     leading '=' (after any '^') makes the names exact ("^=docker0", "=eth0");
//     a ":port" suffix on an entry is ignored. Parsed by
//     config.ParseIfnameFilter, the one parser of this variable.
//   - NCCL_SOCKET_FAMILY: AF_INET or AF_INET6, to restrict the address family.
//   - NCCL_BOOTSTRAP_TIMEOUT: the timeout in seconds, finite, within
//     [MinTimeout, MaxTimeout] (config.ParseBootstrapTimeout).
//
// Fields of [Options] override the environment.
package bootstrap
