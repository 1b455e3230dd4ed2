# Installation: public headers (+ the generated config.h), the static libraries of every layer under the
# export set zerowireTargets (namespace zerowire::), a find_package config with an umbrella target
# zerowire::zerowire, and a pkg-config file. The tools install themselves from tools/CMakeLists.txt.
# Included at the end of the top-level CMakeLists.txt, so every layer's target already exists here; a layer
# that is not (yet) part of the tree is skipped.
include(CMakePackageConfigHelpers)

set(ZW_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zerowire)

install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/zerowire DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/zerowire/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zerowire)

# Layers from the top of the stack down: the order static libraries must appear on a link line.
set(ZW_INSTALLED_LAYERS)
foreach(layer collectives kernels transport bootstrap common)
  if(TARGET zw_${layer})
    set_target_properties(zw_${layer} PROPERTIES EXPORT_NAME ${layer})
    list(APPEND ZW_INSTALLED_LAYERS zw_${layer})
  endif()
endforeach()

install(TARGETS ${ZW_INSTALLED_LAYERS} EXPORT zerowireTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})  # include dirs come from ZW_PUBLIC_INCLUDES
install(EXPORT zerowireTargets NAMESPACE zerowire:: DESTINATION ${ZW_CMAKE_INSTALL_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/zerowireConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/zerowireConfig.cmake
                              INSTALL_DESTINATION ${ZW_CMAKE_INSTALL_DIR})
# 0.x releases may break the API between minor versions.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/zerowireConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zerowireConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/zerowireConfigVersion.cmake
        DESTINATION ${ZW_CMAKE_INSTALL_DIR})

# pkg-config: the layers in link order, then the system libraries they use. Besides hwloc, pthread and rt,
# any plain library a layer links (e.g. ibverbs once the verbs backend exists) is added as -l<name>.
set(ZW_PC_LIBS)
foreach(target ${ZW_INSTALLED_LAYERS})
  list(APPEND ZW_PC_LIBS -l${target})
endforeach()
set(ZW_PC_SYSTEM_LIBS)
foreach(target ${ZW_INSTALLED_LAYERS})
  get_target_property(deps ${target} LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    if(dep MATCHES "^\\$<LINK_ONLY:(.*)>$")
      set(dep ${CMAKE_MATCH_1})
    endif()
    if(TARGET ${dep} OR dep MATCHES "[$<>:]" OR dep MATCHES "^-" OR dep STREQUAL "")
      continue()  # a target (ours, Threads, hwloc: covered below), a generator expression or a flag
    endif()
    get_filename_component(name ${dep} NAME_WE)
    string(REGEX REPLACE "^lib" "" name ${name})
    if(NOT name MATCHES "^(hwloc|pthread|rt)$")
      list(APPEND ZW_PC_SYSTEM_LIBS -l${name})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES ZW_PC_SYSTEM_LIBS)
list(APPEND ZW_PC_SYSTEM_LIBS -lhwloc -lpthread -lrt)
if(ZW_CUDA_ENABLED)
  # The device-memory path links the CUDA runtime (CUDA::cudart, a target, so not found by the loop above).
  list(PREPEND ZW_PC_SYSTEM_LIBS -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart)
endif()
list(JOIN ZW_PC_LIBS " " ZW_PC_LIBS)
# Relocatable: the prefix is derived from where the .pc file lies, so `cmake --install --prefix DIR` works.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ZW_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH ZW_PC_UP "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" ZW_PC_UP "${ZW_PC_UP}")
  set(ZW_PC_PREFIX "\${pcfiledir}/${ZW_PC_UP}")
endif()
cmake_path(ABSOLUTE_PATH CMAKE_INSTALL_LIBDIR BASE_DIRECTORY "\${prefix}" OUTPUT_VARIABLE ZW_PC_LIBDIR)
cmake_path(ABSOLUTE_PATH CMAKE_INSTALL_INCLUDEDIR BASE_DIRECTORY "\${prefix}" OUTPUT_VARIABLE ZW_PC_INCLUDEDIR)
list(JOIN ZW_PC_SYSTEM_LIBS " " ZW_PC_SYSTEM_LIBS)
configure_file(${CMAKE_CURRENT_LIST_DIR}/zerowire.pc.in ${CMAKE_CURRENT_BINARY_DIR}/zerowire.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zerowire.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
