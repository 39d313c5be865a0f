# Installs the library, its headers and a package config so that another project can
# find_package(frugal) and link frugal::frugal.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS frugal EXPORT frugalTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/frugal DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT frugalTargets NAMESPACE frugal:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/frugal)
configure_package_config_file(cmake/frugalConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/frugalConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/frugal)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/frugalConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/frugalConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/frugalConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/frugal)
# The same targets for the build tree, so find_package(frugal) also works with
# CMAKE_PREFIX_PATH (or frugal_DIR) pointing at build/, without installing.
export(EXPORT frugalTargets NAMESPACE frugal:: FILE "${CMAKE_CURRENT_BINARY_DIR}/frugalTargets.cmake")
