// main() for multi-rank GoogleTest binaries (tests/comm/mpi_test_runner.h).
#include "tests/comm/mpi_test_runner.h"

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
