/* cgdr's version, written here and nowhere else: CMakeLists.txt reads these
 * three numbers for project(VERSION), libcgdr.so's SONAME (libcgdr.so.MAJOR),
 * cgdr.pc and the CMake package; cgdr_version() returns CGDR_VERSION_STRING.
 * C and C++. */
#ifndef CGDR_VERSION_H_
#define CGDR_VERSION_H_

#define CGDR_VERSION_MAJOR 0
#define CGDR_VERSION_MINOR 1
#define CGDR_VERSION_PATCH 0

#define CGDR_VERSION_STRINGIFY_(x) #x
#define CGDR_VERSION_STRINGIFY(x) CGDR_VERSION_STRINGIFY_(x)
/* "MAJOR.MINOR.PATCH", e.g. "0.1.0". */
#define CGDR_VERSION_STRING                                                   \
  CGDR_VERSION_STRINGIFY(CGDR_VERSION_MAJOR) "." CGDR_VERSION_STRINGIFY(CGDR_VERSION_MINOR) "." \
  CGDR_VERSION_STRINGIFY(CGDR_VERSION_PATCH)
/* One number that orders versions: 0.1.0 -> 100, 1.2.3 -> 10203. */
#define CGDR_VERSION_NUMBER (CGDR_VERSION_MAJOR * 10000 + CGDR_VERSION_MINOR * 100 + CGDR_VERSION_PATCH)

#endif /* CGDR_VERSION_H_ */
