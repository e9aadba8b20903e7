/*
 * Bare-metal runner for a glowpy bundle (static API) on a Cortex-M core
 * (QEMU mps2-an500 Cortex-M7 by default; BOARD= in the Makefile picks
 * another MPS2 board), semihosting output.
 *
 * The model is described by the generated model_io.h (see README.md and
 * ../gen_io_header.py), which includes the bundle header NAME.h.  The runner
 * copies the inputs into the mutable region, runs the network once, and
 * prints:
 *
 *   output <index> <n_elements>
 *   <n_elements whitespace-separated values>
 *   ...
 *   cycles <SysTick ticks spent in the entry function>
 *   stack <stack high-water mark in bytes, from the top of the stack>
 *   profile <instruction id> <SysTick ticks>   (bundles built -instrument-profile;
 *                                               the last id: the number of calls)
 *
 * A bundle built with -instrument-profile -instrument-profile-counter=callback
 * reads its clock from NAME_profile_counter(), defined here as the same
 * SysTick count as "cycles" (QEMU's MPS2 boards do not model DWT CYCCNT).
 *
 * and exits QEMU with status 0.  If the entry returns an error it prints
 * "error <code>" and exits with status 1; a fault prints "fault ..." and
 * exits with status 3.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "board.h"
#include "model_io.h"

#define NONZERO(n) ((n) > 0 ? (n) : 1)

/* The constant region lives in flash (read-only data).  The extra trailing
 * element keeps the array valid when the model has no constants. */
static const uint8_t constantWeight[MODEL_CONSTANT_MEM_SIZE + 1]
    __attribute__((aligned(MODEL_MEM_ALIGN))) = {
#include MODEL_WEIGHTS_TXT
    0};

/* Mutable weights (inputs/outputs) and activations: zero-initialized RAM in
 * the PSRAM region (section .bss.model, see mps2_sections.ld). */
static uint8_t mutableWeight[NONZERO(MODEL_MUTABLE_MEM_SIZE)]
    __attribute__((aligned(MODEL_MEM_ALIGN), section(".bss.model.mutable")));
static uint8_t activations[NONZERO(MODEL_ACTIVATIONS_MEM_SIZE)]
    __attribute__((aligned(MODEL_MEM_ALIGN), section(".bss.model.activations")));

#ifdef MODEL_PROFILE_COUNTER
uint64_t MODEL_PROFILE_COUNTER(void) { return cycles_now(); }
#endif

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal half -> normal float */
    exp = 113u;
    while (!(man & 0x400u)) {
      man <<= 1;
      exp--;
    }
    bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
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
    case MODEL_DT_INT32: { int32_t v; memcpy(&v, p, 4); printf("%ld", (long)v); break; }
    case MODEL_DT_UINT32: { uint32_t v; memcpy(&v, p, 4); printf("%lu", (unsigned long)v); break; }
    case MODEL_DT_INT64: { int64_t v; memcpy(&v, p, 8); print_i64(v); break; }
    case MODEL_DT_UINT64: { uint64_t v; memcpy(&v, p, 8); print_u64(v); break; }
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

  cycles_start();
  stack_paint();
  uint64_t t0 = cycles_now();
  int rc = MODEL_ENTRY((uint8_t *)constantWeight, mutableWeight, activations);
  uint64_t t1 = cycles_now();
  uint32_t stack = stack_high_water();

  if (rc != GLOW_SUCCESS) {
    printf("error %d\n", rc);
    return 1;
  }
  for (int i = 0; i < MODEL_NUM_OUTPUTS; i++) {
    const model_output_t *o = &model_outputs[i];
    uint32_t size = dtype_size(o->dtype);
    printf("output %d %lu\n", i, (unsigned long)o->count);
    for (uint32_t k = 0; k < o->count; k++) {
      print_value(mutableWeight + o->offset + k * size, o->dtype);
      fputc((k % 8u == 7u || k + 1u == o->count) ? '\n' : ' ', stdout);
    }
  }
  fputs("cycles ", stdout);
  print_u64(t1 - t0);
  printf("\nstack %lu\n", (unsigned long)stack);
#ifdef MODEL_PROFILE_OFFSET
  for (int i = 0; i < MODEL_PROFILE_ENTRIES; i++) {
    uint64_t count;
    memcpy(&count, mutableWeight + MODEL_PROFILE_OFFSET + 8 * i, sizeof count);
    printf("profile %d ", i);
    print_u64(count);
    fputc('\n', stdout);
  }
#endif
  if (stack_overflowed()) {
    printf("error stack overflow (stack size %lu)\n", (unsigned long)board_stack_size());
    return 2;
  }
  fflush(stdout);
  return 0;
}
