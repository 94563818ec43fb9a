/*===- CApiSmoke.c - The C ABI compiled as C ------------------------------===*\
|*                                                                            *|
|* Part of Polymesh.                                                          *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * Compiled by the C compiler, so the header stays valid C: a device program
 * written against the ABI as generated code would call it (a grouped ring
 * exchange, then an all-reduce), and a driver that runs it on four devices
 * with non-contiguous ids.
 */

#include "polymesh/Runtime/PolymeshRuntime.h"

#include "CApiSmoke.h"

static const int64_t kDevices[4] = {3, 5, 6, 10};

static int32_t ringThenSum(PolymeshRuntime *rt, int64_t device, void *user) {
  int64_t *results = (int64_t *)user;
  int64_t index = 0;
  while (kDevices[index] != device)
    ++index;
  int64_t next = kDevices[(index + 1) % 4], prev = kDevices[(index + 3) % 4];
  int64_t out = device * 100, in = -1, total = 0;
  int32_t status = polymesh_rt_group_start(rt, device);
  if (status == POLYMESH_RT_OK)
    status = polymesh_rt_send(rt, device, next, &out, sizeof(out));
  if (status == POLYMESH_RT_OK)
    status = polymesh_rt_recv(rt, device, prev, &in, sizeof(in));
  if (status == POLYMESH_RT_OK)
    status = polymesh_rt_group_end(rt, device);
  if (status == POLYMESH_RT_OK)
    status = polymesh_rt_all_reduce(rt, device, kDevices, 4, &in, &total, 1,
                                    POLYMESH_RT_I64, POLYMESH_RT_SUM);
  if (status != POLYMESH_RT_OK)
    return status;
  /* Received from the previous device, then the sum of all. */
  results[2 * index] = in;
  results[2 * index + 1] = total;
  return POLYMESH_RT_OK;
}

int polymeshCSmokeRun(void) {
  int64_t results[8] = {0};
  int64_t i;
  PolymeshRuntime *rt = polymesh_rt_create_loopback(kDevices, 4, 20000);
  int32_t status = polymesh_rt_run_devices(rt, ringThenSum, results);
  const char *error = polymesh_rt_last_error(rt);
  int failed = status != POLYMESH_RT_OK || error[0] != '\0';
  for (i = 0; i < 4; ++i) {
    failed |= results[2 * i] != kDevices[(i + 3) % 4] * 100;
    failed |= results[2 * i + 1] != (3 + 5 + 6 + 10) * 100;
  }
  polymesh_rt_destroy(rt);
  return failed;
}
