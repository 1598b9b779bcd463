# FindCUDNN: locates cuDNN headers and library (CUDA toolkit dir, CUDNN_ROOT, system paths).
# Defines CUDNN_FOUND, CUDNN_VERSION and the imported target CUDNN::CUDNN.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
set(_cudnn_ver_file ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
if(CUDNN_INCLUDE_DIR AND EXISTS ${_cudnn_ver_file})
  file(STRINGS ${_cudnn_ver_file} _m REGEX "^#define CUDNN_MAJOR +[0-9]+")
  file(STRINGS ${_cudnn_ver_file} _n REGEX "^#define CUDNN_MINOR +[0-9]+")
  string(REGEX MATCH "[0-9]+$" _m "${_m}")
  string(REGEX MATCH "[0-9]+$" _n "${_n}")
  set(CUDNN_VERSION "${_m}.${_n}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
