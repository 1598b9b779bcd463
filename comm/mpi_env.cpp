// Environment defaults for MPI (see mpi_env.h).
#include "comm/mpi_env.h"

#include <cstdlib>

namespace st::comm {

void apply_mpi_defaults() {
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);  // ring
  setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", /*overwrite=*/0);     // binomial
}

}  // namespace st::comm
