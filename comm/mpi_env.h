// MPI settings the MPI backend relies on, applied through the environment before MPI_Init (Open
// MPI reads its MCA parameters there); a value the user already set is kept.
//   OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 (ring): every wait has a deadline, so the backend
//   all-reduces with MPI_Iallreduce, which Open MPI runs through libnbc. libnbc's default for
//   fewer than 4 ranks or an in-place buffer is a binomial reduce followed by a broadcast; at 2
//   ranks that moved data at ~half the bus bandwidth of the blocking MPI_Allreduce from 256 KB up
//   (docs/PERFORMANCE.md, comm), where the ring matches it.
//   OMPI_MCA_coll_libnbc_ireduce_algorithm=2 (binomial): comm's reduce (ZeRO's gradient buckets)
//   is MPI_Ireduce. libnbc's default at ≤ 4 ranks and ≥ 64 KiB is its chain, which on the
//   development VM took 2-3x the binomial tree's time for 25-100 MB (docs/PERFORMANCE.md,
//   "ZeRO-1 by reduce").
// Other MPI implementations ignore the variables.
#pragma once

namespace st::comm {

// Call before MPI_Init / MPI_Init_thread (launch/ and the MPI test and benchmark mains do).
void apply_mpi_defaults();

}  // namespace st::comm
