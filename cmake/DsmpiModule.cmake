# dsmpi_module(NAME
#              [SOURCES src...]
#              [INTERFACE hdr...]          headers other modules may include
#              [PUBLIC_DEPENDS mod...]     modules the INTERFACE headers include
#              [DEPENDS mod...])           modules only the sources include
#
# One object library per libdsmpi module, dsmpi_mod_NAME.  Its sources see
# their own folder (own headers included bare, "dsi_x.h") and, as
# "mod/dsi_mod.h", the INTERFACE headers of the modules it declares.  Those
# headers are linked into <build>/libdsmpi/interfaces/NAME/NAME/, and only
# that folder is on a dependent's include path: including another module's
# private header, or a module not declared, fails the build.  Core is the
# base of every module; its headers are included bare ("dsi_core.h").

add_library(dsmpi_module_flags INTERFACE)
target_compile_definitions(dsmpi_module_flags INTERFACE DSMPI_BUILDING_LIBRARY)
if(DSMPI_FAULT_INJECTION)
  target_compile_definitions(dsmpi_module_flags INTERFACE DSMPI_FAULT_INJECTION=1)
endif()
target_include_directories(dsmpi_module_flags INTERFACE
  ${PROJECT_SOURCE_DIR}/include ${DSMPI_CBLAS_INCLUDE_DIR})
target_link_libraries(dsmpi_module_flags INTERFACE MPI::MPI_C dsmpi_private_deps dsmpi_build_flags)


function(dsmpi_module name)
  cmake_parse_arguments(M "" "" "SOURCES;INTERFACE;PUBLIC_DEPENDS;DEPENDS" ${ARGN})
  set(target dsmpi_mod_${name})
  add_library(${target} OBJECT ${M_SOURCES})
  set_target_properties(${target} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target} PRIVATE dsmpi_module_flags)

  set(iface ${PROJECT_BINARY_DIR}/libdsmpi/interfaces/${name})
  set(link_dir ${iface}/${name})
  if(name STREQUAL "core")
    set(link_dir ${iface})
  endif()
  file(REMOVE_RECURSE ${iface})
  file(MAKE_DIRECTORY ${link_dir})
  foreach(hdr IN LISTS M_INTERFACE)
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/${hdr} ${link_dir}/${hdr} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC ${iface})

  if(NOT name STREQUAL "core")
    target_link_libraries(${target} PUBLIC dsmpi_mod_core)
  endif()
  foreach(dep IN LISTS M_PUBLIC_DEPENDS)
    target_link_libraries(${target} PUBLIC dsmpi_mod_${dep})
  endforeach()
  foreach(dep IN LISTS M_DEPENDS)
    target_link_libraries(${target} PRIVATE dsmpi_mod_${dep})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY DSMPI_MODULES ${name})
  set_property(GLOBAL APPEND PROPERTY DSMPI_MODULE_DIRS ${CMAKE_CURRENT_SOURCE_DIR})
endfunction()
