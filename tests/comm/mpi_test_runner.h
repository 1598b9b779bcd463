// The run behind every multi-rank GoogleTest main (ctest runs them under mpirun -np N): MPI
// initialised, a failed assertion on any rank aborts the job at once (no rank left waiting in a
// collective), a deadline-bounded final barrier, MPI finalised. With a skip reason every test is
// skipped and the ranks exit 77, which ctest reports as Skipped (SKIP_RETURN_CODE 77).
#pragma once
#include <string>

int run_mpi_tests(int argc, char** argv, const std::string& skip_reason = "");
