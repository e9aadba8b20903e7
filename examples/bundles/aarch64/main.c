/*
 * AArch64 Linux runner for a glowpy bundle (static API), built static and run
 * under qemu-aarch64 (or on real AArch64 Linux).
 *
 * Same model description (model_io.h, see ../gen_io_header.py) and the same
 * output as the Cortex-M7 runner:
 *
 *   output <index> <n_elements>
 *   <n_elements whitespace-separated values>
 *   ...
 *   cycles <generic-timer ticks (CNTVCT_EL0) spent in the entry function>
 *   stack <bytes of stack used by the entry function>
 *   profile <instruction id> <CNTVCT_EL0 ticks>   (bundles built -instrument-profile;
 *                                                 the last id: the number of calls)
 *
 * Weights are compiled in (#include of NAME.weights.txt), like on the
 * microcontroller.  The entry runs on a thread whose stack is allocated here,
 * painted with a pattern and guarded by an inaccessible page, so the stack
 * high-water mark can be measured and an overflow faults.
 * Exit status: 0 ok, 1 the entry returned an error ("error <code>"),
 * 3 setup failure.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model_io.h"

#ifndef RUNNER_STACK_SIZE
#define RUNNER_STACK_SIZE (8u << 20)
#endif
#define STACK_PAINT 0xC5C5C5C5C5C5C5C5ull
#define NONZERO(n) ((n) > 0 ? (n) : 1)

static const uint8_t constantWeight[MODEL_CONSTANT_MEM_SIZE + 1]
    __attribute__((aligned(MODEL_MEM_ALIGN))) = {
#include MODEL_WEIGHTS_TXT
    0};
static uint8_t mutableWeight[NONZERO(MODEL_MUTABLE_MEM_SIZE)] __attribute__((aligned(MODEL_MEM_ALIGN)));
static uint8_t activations[NONZERO(MODEL_ACTIVATIONS_MEM_SIZE)] __attribute__((aligned(MODEL_MEM_ALIGN)));

static inline uint64_t read_counter(void) {
  uint64_t v;
  __asm__ volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(v)::"memory");
  return v;
}

struct job {
  int rc;
  uint64_t ticks;
  uintptr_t frame;
};

static void *run_entry(void *arg) {
  struct job *job = arg;
  job->frame = (uintptr_t)__builtin_frame_address(0);
  uint64_t t0 = read_counter();
  job->rc = MODEL_ENTRY((uint8_t *)constantWeight, mutableWeight, activations);
  job->ticks = read_counter() - t0;
  return NULL;
}

static float half_to_float(uint16_t h) {
  _Float16 f;
  memcpy(&f, &h, sizeof h);
  return (float)f;
}

static void print_value(const uint8_t *p, uint32_t dtype) {
  switch (dtype) {
    case MODEL_DT_FLOAT32: { float v; memcpy(&v, p, 4); printf("%.9g", (double)v); break; }
    case MODEL_DT_FLOAT64: { double v; memcpy(&v, p, 8); printf("%.17g", v); break; }
    case MODEL_DT_FLOAT16: { uint16_t v; memcpy(&v, p, 2); printf("%.9g", (double)half_to_float(v)); break; }
    case MODEL_DT_BFLOAT16: { /* the upper half of a float */
      uint16_t v; uint32_t bits; float f;
      memcpy(&v, p, 2); bits = (uint32_t)v << 16; memcpy(&f, &bits, 4);
      printf("%.9g", (double)f); break;
    }
    case MODEL_DT_INT8: printf("%d", (int)(int8_t)p[0]); break;
    case MODEL_DT_UINT8: printf("%u", (unsigned)p[0]); break;
    case MODEL_DT_BOOL: printf("%u", p[0] ? 1u : 0u); break;
    case MODEL_DT_INT16: { int16_t v; memcpy(&v, p, 2); printf("%d", (int)v); break; }
    case MODEL_DT_UINT16: { uint16_t v; memcpy(&v, p, 2); printf("%u", (unsigned)v); break; }
    case MODEL_DT_INT32: { int32_t v; memcpy(&v, p, 4); printf("%d", v); break; }
    case MODEL_DT_UINT32: { uint32_t v; memcpy(&v, p, 4); printf("%u", v); break; }
    case MODEL_DT_INT64: { int64_t v; memcpy(&v, p, 8); printf("%lld", (long long)v); break; }
    case MODEL_DT_UINT64: { uint64_t v; memcpy(&v, p, 8); printf("%llu", (unsigned long long)v); break; }
    default: printf("?"); break;
  }
}

static uint32_t dtype_size(uint32_t dtype) {
  switch (dtype) {
    case MODEL_DT_FLOAT64: case MODEL_DT_INT64: case MODEL_DT_UINT64: return 8;
    case MODEL_DT_FLOAT32: case MODEL_DT_INT32: case MODEL_DT_UINT32: return 4;
    case MODEL_DT_FLOAT16: case MODEL_DT_BFLOAT16: case MODEL_DT_INT16: case MODEL_DT_UINT16: return 2;
    default: return 1;
  }
}

int main(void) {
  for (int i = 0; i < MODEL_NUM_INPUTS; i++)
    memcpy(mutableWeight + model_inputs[i].offset, model_inputs[i].data, model_inputs[i].nbytes);

  /* Thread stack: [guard page][RUNNER_STACK_SIZE bytes], painted. */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t size = RUNNER_STACK_SIZE < PTHREAD_STACK_MIN ? PTHREAD_STACK_MIN : RUNNER_STACK_SIZE;
  size = (size + page - 1) / page * page;
  uint8_t *mem = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || mprotect(mem, page, PROT_NONE) != 0) {
    perror("stack");
    return 3;
  }
  uint64_t *stack = (uint64_t *)(mem + page);
  for (size_t i = 0; i < size / 8; i++) stack[i] = STACK_PAINT;

  pthread_attr_t attr;
  pthread_t thread;
  struct job job = {0, 0, 0};
  int err = pthread_attr_init(&attr);
  if (!err) err = pthread_attr_setstack(&attr, stack, size);
  if (!err) err = pthread_create(&thread, &attr, run_entry, &job);
  if (!err) err = pthread_join(thread, NULL);
  if (err) {
    fprintf(stderr, "cannot run the entry on a %zu-byte stack: %s\n", size, strerror(err));
    return 3;
  }
  /* Deepest write below the entry thread's first frame. */
  size_t lowest = 0;
  while (lowest < size / 8 && stack[lowest] == STACK_PAINT) lowest++;
  uintptr_t low_addr = (uintptr_t)&stack[lowest];
  unsigned long used = job.frame > low_addr ? (unsigned long)(job.frame - low_addr) : 0ul;

  if (job.rc != GLOW_SUCCESS) {
    printf("error %d\n", job.rc);
    return 1;
  }
  for (int i = 0; i < MODEL_NUM_OUTPUTS; i++) {
    const model_output_t *o = &model_outputs[i];
    uint32_t sz = dtype_size(o->dtype);
    printf("output %d %u\n", i, o->count);
    for (uint32_t k = 0; k < o->count; k++) {
      print_value(mutableWeight + o->offset + (size_t)k * sz, o->dtype);
      putchar((k % 8u == 7u || k + 1u == o->count) ? '\n' : ' ');
    }
  }
  printf("cycles %llu\n", (unsigned long long)job.ticks);
  printf("stack %lu\n", used);
#ifdef MODEL_PROFILE_OFFSET
  for (int i = 0; i < MODEL_PROFILE_ENTRIES; i++) {
    uint64_t count;
    memcpy(&count, mutableWeight + MODEL_PROFILE_OFFSET + 8 * i, sizeof count);
    printf("profile %d %llu\n", i, (unsigned long long)count);
  }
#endif
  return 0;
}
