# Tests of the launch tooling: the set-up, demo and plot scripts, the installed package, the
# README's commands and the mpirun wrapper. Included from tests/launch/CMakeLists.txt.
# launch/setup.sh without package network (apt-get and dpkg stubbed), and demo.sh --help. These and
# the plot test run no binary of the build (label source-only: the sanitizer pass skips them).
add_test(NAME test_launch_setup COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/setup_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test_launch_setup PROPERTIES LABELS "cpu;source-only" TIMEOUT 420)
add_test(NAME test_launch_demo_help COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/demo_help_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test_launch_demo_help PROPERTIES LABELS "cpu;source-only" TIMEOUT 60)
add_test(NAME test_launch_plot COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/plot_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test_launch_plot PROPERTIES LABELS "cpu;source-only" TIMEOUT 120)
# The installed package: needs the whole build (cmake --install), as test.sh does before ctest;
# its distributed example runs under mpirun -np 2.
add_test(NAME test_launch_install
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
          ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_launch_install PROPERTIES LABELS cpu TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# README.md's commands after the demo, read from the README and run in order (2 ranks through
# launch/mpirun.sh for the demo's stand-in and the resume).
add_test(NAME test_launch_readme_flow
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/readme_flow_test.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:shardtrain>)
set_tests_properties(test_launch_readme_flow PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4)
add_test(NAME test_launch_mpirun_wrapper
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpirun_wrapper_test.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:shardtrain>)
set_tests_properties(test_launch_mpirun_wrapper PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 3)
# The first hour under launch/mpirun.sh: one-line errors (no Open MPI banner), the launch lines
# errors and `plan` print run as printed, the flags that keep a global batch across rank counts,
# the largest rank's memory on the step line, each rank's dp/tp/pp in the trace.
add_test(NAME test_launch_first_hour_mpi
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/first_hour_mpi_test.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:shardtrain>)
set_tests_properties(test_launch_first_hour_mpi PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4)
