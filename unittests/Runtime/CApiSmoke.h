/*===- CApiSmoke.h - Entry point of the C smoke program -----------*- C -*-===*\
|*                                                                            *|
|* Part of Polymesh.                                                          *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef POLYMESH_UNITTESTS_RUNTIME_CAPISMOKE_H
#define POLYMESH_UNITTESTS_RUNTIME_CAPISMOKE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the C program of CApiSmoke.c; returns 0 when every check passed. */
int polymeshCSmokeRun(void);

#ifdef __cplusplus
}
#endif

#endif /* POLYMESH_UNITTESTS_RUNTIME_CAPISMOKE_H */
