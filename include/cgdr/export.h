/* CGDR_EXPORT marks what libcgdr.so exports: the C API and the functions of
 * the C++ API (the headers in include/cgdr). The library is compiled with
 * -fvisibility=hidden, so everything else stays inside it. C and C++. */
#ifndef CGDR_EXPORT_H_
#define CGDR_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define CGDR_EXPORT __attribute__((visibility("default")))
#else
#define CGDR_EXPORT
#endif

#endif /* CGDR_EXPORT_H_ */
