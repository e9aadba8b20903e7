/*
 * Board support for the Cortex-M bundle runner on QEMU's MPS2 boards:
 * SysTick cycle counting, stack high-water mark, semihosting exit.
 * Implemented in startup.c.
 */
#ifndef GLOWPY_BOARD_H
#define GLOWPY_BOARD_H

#include <stdint.h>

/* Bytes in the main stack (linker symbols __StackLimit .. __StackTop). */
uint32_t board_stack_size(void);

/* Start the SysTick counter (24-bit, reloaded, with an overflow interrupt
 * counting the wraps) on the processor clock. */
void cycles_start(void);

/* SysTick ticks since cycles_start(), 64-bit, safe against wraps. */
uint64_t cycles_now(void);

/* Paint the unused part of the stack (below the caller's frame) with a
 * pattern; stack_high_water() then reports the deepest use since, in bytes
 * measured from the top of the stack. */
void stack_paint(void);
uint32_t stack_high_water(void);

/* Nonzero if the lowest stack word was overwritten (overflow). */
int stack_overflowed(void);

/* Print a 64-bit unsigned number (newlib-nano printf has no %llu). */
void print_u64(uint64_t v);
void print_i64(int64_t v);

#endif
