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
// its own, checks in with the root and receives the listen addresses of its
// fingers, ranks rank+2^k (mod n) for 2^k < n, which it acknowledges. The
// root exits once every rank acknowledged its table. From then on the ranks talk to each other
// directly through the returned [*Conn]: [Conn.AllGather], [Conn.Barrier],
// [Conn.Send] and [Conn.Recv]. A rank opens a connection only to a peer it
// sends to, and learns the address of a peer that is not a finger by a
// lookup routed through the fingers (at most ⌈log2 n⌉ hops), so that its
// memory and descriptors grow with log n and the peers it talks to, not
// with n.
//
// With several roots ([JoinScalable], NCCL's ncclCommInitRankScalable),
// root i serves the check-in of the ranks [RootSlice] names; once its slice
// is complete it hands it to the other roots, and it answers its ranks when
// it knows every slice.
//
// Barrier and AllGather go up a binomial tree to rank 0 and back down it
// (the ring for an AllGather with a large block), in 2·⌈log2 n⌉ steps and
// 2(n-1) messages over n-1 connections: a child r dials its parent, a
// finger r+2^k, and the parent answers on that connection.
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
//	             address as "host:port"), kind 2 = peer (rank → rank, no address),
//	             kind 3 = check-in with root i of several: after the address,
//	             i u16 | nroots u16 | nroots × (magic u64 | len u16 | "host:port"),
//	             kind 4 = root → root (rank is the sender's root index, token
//	             0), followed by one frame:
//	             'P' | lo u32 | count u32 | count × (len u16 | addr | token u64),
//	             answered by one frame 'A' (the pusher retries until it reads it)
//	             token: the rank's random check-in token; a peer hello must
//	             carry the token that the receiver holds for its rank, so a
//	             process that knows only the id cannot speak for a rank
//
// Rank → root, after the hello:
//
//	query      = 'Q'   "who is still missing?" (sent when the rank's own
//	                   timeout expires; the root answers with a status frame)
//	ack        = 'A' | rank u32 | token u64
//	             "my table arrived", with the hello's rank and token, sent
//	             before the rank closes the connection. Any other frame, or
//	             an ack with another rank or token, makes the root drop the
//	             connection with a warning naming the rank and its address
//
// Root → rank:
//
//	table      = 'T' | k u32 | k × (len u16 | "host:port" | token u64)
//	             the rank's own entry, then its fingers, ranks rank+1,
//	             rank+2, rank+4, ... (2^j < nranks), then the ranks rank-1,
//	             rank-2, rank-4, ... with an empty address: the tokens of the
//	             ranks that dial it in the collectives (k = 1 + 2⌈log2 nranks⌉)
//	status     = 'S' | final u8 | after_ms u64 | nranks u32 | missing u32 | count u32 | count × rank u32
//	             how many ranks have not checked in, and the first of them
//	             (count ≤ 64); final=1 when the root itself timed out and
//	             gives up
//	reject     = 'R' | text  (duplicate rank, rank out of range, nranks mismatch)
//
// The root writes the table to every rank once all nranks have checked in
// (with several roots: once it knows every slice), then waits for every
// rank's ack: a table written is not a table received, as the first write
// into a connection that the peer has closed succeeds. Until then it keeps
// listening, and answers a rank that checks in again with the same token
// (its check-in connection broke before the table arrived) with its table
// again; a check-in of that rank with another token is rejected. Once
// every rank acknowledged, it half-closes the connections and exits when
// the ranks hang up (or after a short grace period). Its timeout names the
// ranks that never acknowledged ([TimeoutError].Unacked), with what their
// connections sent wrong, if anything.
//
// Rank → rank: each rank dials a peer lazily, the first time it sends to it,
// and uses that connection for its own messages to that peer (one
// connection per direction, so two ranks dialing each other never race).
// The only messages that go the other way are a collective's on the way
// down its tree, which a parent sends on its child's connection: its
// first frame back is the parent's own peer hello, whose token the child
// checks as any receiver does. After the hello, every frame is
//
//	message    = class u8 | tag i64 | data
//
// class 0 carries [Conn.Send] messages; class 1 carries the steps of
// [Conn.AllGather] and [Conn.Barrier], whose tag is a per-communicator
// collective sequence number, negated on the way down the tree (an
// AllGather message is flag u8, then when the flag is 0 count u32 |
// count × len u32 | the blocks); class 2 (empty) says
// that the sender's collective number tag failed (cancelled, timed out, a
// peer gone), and is passed on to the fingers by every rank that hears of
// it first: from then on every collective of that number or later fails
// with [ErrCollectiveBroken] on every rank, so a leftover block is never
// taken for a later call's. Class 3 asks for the address of rank tag
// (origin u32 | origin's token u64 | origin's address) and travels finger
// to finger; rank tag learns the origin's address and token, and answers
// the origin directly with class 4 (the origin's token u64, echoed | its
// own address), as the first frame of its connection to the origin when
// it opens one for it. The receiver queues messages by (peer, class, tag);
// TCP keeps the order of messages with the same key, and messages with
// different keys may be received in any order.
//
// A rank accepts a peer hello only with the token it holds for that rank:
// the root gives it those of its fingers and of the ranks rank-2^k (every
// collective step and every hop of a lookup goes from a rank to one of its
// fingers); a lookup gives the target the origin's token; the answer's
// connection gives the origin the target's, accepted because the answer
// echoes the origin's token, which only the ranks the lookup passed hold.
// Roots hand each other their slices with the tokens in them. A hello
// with an unknown or wrong token is refused before the connection can
// deliver anything.
//
// # Limits
//
// A connection must send its hello within min(5 s, timeout) or it is
// closed, and at most 64 connections of a root or a rank wait for their
// hello: a new one waits in the listen backlog until one of them said
// hello or the reader of one has waited 100 ms for it (counted from when
// the reader started, so that a process starved of CPU does not close
// hellos it has not read yet), which is then closed. A rank whose
// check-in connection breaks before the root answered (EOF, reset,
// refused) checks in again with the same listener and token, after a
// jittered backoff from 10 ms doubling to 1 s, within the timeout; the
// root takes a rank's new connection in place of the old one when the
// token is the same, and does not answer while a rank of its slice has
// hung up without coming back; after the tables, it answers such a rank
// with its table again. A rank whose ack cannot be written checks in
// again; an ack written into a connection cut after the table arrived is
// lost: the rank goes on, and its root times out naming it. Bootstrap sockets have TCP keep-alive off:
// every wait is bounded by the timeout, and its setsockopt calls were a
// measurable share of connection setup at thousands of ranks. The bytes that one peer sent and
// nobody received are bounded by [Options].MaxQueuedBytes (twice the
// message limit by default): past it the peer's connection is dropped and
// receives from it fail with [ErrQueueFull]. A message frame may announce
// at most [Options].MaxMessageSize (default [DefaultMaxMessageSize], at
// most [MaxMessageSize]) plus its header, and its body must follow its
// length within the timeout; a root reply at most what a table of
// 1+2⌈log2 nranks⌉ entries needs, a slice from another root what nranks
// entries need. A root takes the first slice of each other root and drops
// later ones with a warning. Longer frames are
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
