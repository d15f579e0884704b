# package.cmake — what `cmake --install` puts where, the pkg-config file, the
# CMake package and the Debian package (cpack -G DEB). Included from the
# root CMakeLists.txt once every target is defined.
include(CMakePackageConfigHelpers)

set(WDS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/wds)
install(TARGETS wds wds_shared EXPORT wdsTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(WDS_BUILD_TOOLS) # not in `pip install .`'s build (WDS_BUILD_TOOLS=OFF)
  install(TARGETS wds_cli wds_train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/wds
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/wds/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wds)

# find_package(wds): the exported targets, and a config that finds what the
# static library links (the shared one carries its own dependencies).
install(EXPORT wdsTargets NAMESPACE wds:: DESTINATION ${WDS_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/wdsConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/wdsConfig.cmake
                              INSTALL_DESTINATION ${WDS_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wdsConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wdsConfig.cmake
              ${PROJECT_BINARY_DIR}/wdsConfigVersion.cmake
        DESTINATION ${WDS_CMAKE_DIR})

# wds.pc: relocatable (prefix relative to the file), -lwds (the shared
# library, or the static one with pkg-config --static and -Wl,-Bstatic),
# the static library's dependencies in Requires.private / Libs.private.
set(WDS_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${WDS_PC_DIR}")
  set(WDS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH WDS_PC_PREFIX_REL /p/${WDS_PC_DIR} /p)
  set(WDS_PC_PREFIX "\${pcfiledir}/${WDS_PC_PREFIX_REL}")
endif()
# libarchive, libcurl and libxml2 are not linked (shards/*_dl.c load them on
# first use), so a static link needs only the dynamic loader's -ldl.
set(WDS_PC_DL_LIBS "")
foreach(_wds_dl ${CMAKE_DL_LIBS})
  string(APPEND WDS_PC_DL_LIBS " -l${_wds_dl}")
endforeach()
set(WDS_PC_CUDA_LIBS "")
if(WDS_HAVE_CUDA)
  set(WDS_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/wds.pc.in ${PROJECT_BINARY_DIR}/wds.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/wds.pc DESTINATION ${WDS_PC_DIR})

# cpack -G DEB: one package with the tools, both libraries and the headers.
# Its run-time dependencies come from dpkg-shlibdeps (dpkg-dev, file) where
# present, else from the list below (Debian 12's names); the -dev packages
# the static library and the headers need are suggested.
set(CPACK_PACKAGE_NAME wds)
set(CPACK_PACKAGE_VENDOR wds)
set(CPACK_PACKAGE_CONTACT "wds developers <wds@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Streams WebDataset .tar shards into training (library and tools)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
find_program(WDS_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(WDS_FILE file)
# libarchive is loaded with dlopen (shards/archive_dl.c), which
# dpkg-shlibdeps cannot see: named here, with the oldest version wds takes
# (WDS__ARCHIVE_MIN_VERSION); libcurl and libxml2 (http(s):// and s3://
# only) are recommended.
if(WDS_DPKG_SHLIBDEPS AND WDS_FILE)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libarchive13 (>= 3.2.0)")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "libc6, libarchive13 (>= 3.2.0), libzstd1, zlib1g, liblzma5, libturbojpeg0, libpng16-16, libnettle8")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libcurl4 (>= 7.86.0), libxml2")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "pkg-config, libarchive-dev, libzstd-dev, zlib1g-dev, liblzma-dev, libturbojpeg0-dev, libpng-dev, nettle-dev, libcurl4-openssl-dev, libxml2-dev")
include(CPack)
