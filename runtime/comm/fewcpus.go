package comm

import "fmt"

// fewCPUsWarning is the warning for a process whose CPU affinity leaves it
// n CPUs when its communicator uses NET, or "" when n is enough. The
// proxy, the socket helpers and the Go runtime all run on those CPUs;
// with one or two (OpenMPI binds each of 2 or fewer processes to one core
// by default) they queue behind each other and NET runs several times
// slower (session 13: nccl-tests over two fake hosts).
func fewCPUsWarning(n int) string {
	if n > 2 {
		return ""
	}
	return fmt.Sprintf("NET: this process may run on %d CPU(s) (its affinity mask); the proxy and the socket threads share them and NET slows down: give each rank several cores (mpirun --bind-to none, or --map-by with enough PEs)", n)
}
