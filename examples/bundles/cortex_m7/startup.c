/*
 * Start-up code for the Cortex-M bundle runner on QEMU's MPS2 boards
 * (mps2-an500 Cortex-M7, mps2-an386 Cortex-M4, mps2-an385 Cortex-M3,
 * mps2-an505 Cortex-M33; the linker script of the board gives the addresses).
 *
 * - vector table and Reset_Handler: enables the FPU, copies .data, zeroes
 *   .bss and the model region, paints the stack, sets up a guard below the
 *   stack (Armv7-M: an MPU region; Armv8-M Mainline: the stack limit
 *   registers), switches thread mode to the process stack (PSP; handlers keep
 *   their own stack on MSP, so a stack overflow can still be reported), runs
 *   main() and exits QEMU through semihosting (newlib/rdimon exit ->
 *   SYS_EXIT / SYS_EXIT_EXTENDED, so the exit status reaches QEMU's);
 * - fault handlers that report the fault over semihosting and exit with
 *   status 3 instead of hanging;
 * - SysTick cycle counter with overflow counting;
 * - stack painting / high-water mark;
 * - _sbrk for newlib's malloc (heap between the end of .bss and the end of RAM).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "board.h"

/* Linker script symbols. */
extern uint32_t __StackTop[], __StackLimit[], __HandlerStackTop[], __HandlerStackLimit[];
extern uint32_t __data_start__[], __data_end__[], __data_load__[];
extern uint32_t __bss_start__[], __bss_end__[];
extern uint32_t __model_start__[], __model_end__[];
extern char __HeapBase[], __HeapLimit[];

int main(void);
void initialise_monitor_handles(void);

#define STACK_PAINT 0xC5C5C5C5u

/* System control registers. */
#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define SCB_ICSR  (*(volatile uint32_t *)0xE000ED04u)
#define SCB_CFSR  (*(volatile uint32_t *)0xE000ED28u)
#define SCB_HFSR  (*(volatile uint32_t *)0xE000ED2Cu)
#define SCB_MMFAR (*(volatile uint32_t *)0xE000ED34u)
#define SCB_BFAR  (*(volatile uint32_t *)0xE000ED38u)
#define SCB_SHCSR (*(volatile uint32_t *)0xE000ED24u)
#define MPU_CTRL  (*(volatile uint32_t *)0xE000ED94u)
#define MPU_RNR   (*(volatile uint32_t *)0xE000ED98u)
#define MPU_RBAR  (*(volatile uint32_t *)0xE000ED9Cu)
#define MPU_RASR  (*(volatile uint32_t *)0xE000EDA0u)
#define SYST_CSR  (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR  (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR  (*(volatile uint32_t *)0xE000E018u)
#define ICSR_PENDSTSET (1u << 26)
#define SYSTICK_RELOAD 0x00FFFFFFu
#define CFSR_MSTKERR (1u << 4)
#define CFSR_STKERR (1u << 12)
#define CFSR_STKOF (1u << 20) /* Armv8-M: a stack limit register was crossed */

/* Armv8-M Mainline cores check every stack access against a limit register, so
 * an overflow is a UsageFault whatever lies below RAM.  Armv7-M cores have no
 * such register: an MPU region forbids the 16 MiB below RAM instead (QEMU maps
 * the space below 0x20000000 as "unimplemented": reads zero, no fault). */
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define STACK_LIMIT_REGISTERS 1
#else
#define STACK_LIMIT_REGISTERS 0
#endif
#define STACK_GUARD_SIZE_LOG2 24u /* 16 MiB; RAM starts on a 16 MiB boundary */
#define STACK_GUARD_BASE ((uint32_t)__StackLimit - (1u << STACK_GUARD_SIZE_LOG2))

static inline uint32_t get_sp(void) {
  uint32_t sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  return sp;
}

/* ------------------------------------------------------------------ */
/* Semihosting (used directly only by the fault handlers).            */

static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static void sh_puts(const char *s) { semihost(0x04 /* SYS_WRITE0 */, s); }

/* Exit with a status, straight through semihosting: newlib's _exit needs its
 * semihosting feature probe, which a fault during start-up (a stack overflow
 * in initialise_monitor_handles) interrupts, and then exits with status 0. */
static void sh_exit(uint32_t status) __attribute__((noreturn));
static void sh_exit(uint32_t status) {
  const uint32_t block[2] = {0x20026u /* ADP_Stopped_ApplicationExit */, status};
  semihost(0x20 /* SYS_EXIT_EXTENDED */, block);
  for (;;) {
  }
}

static void sh_hex(uint32_t v) {
  char buf[11] = "0x";
  for (int i = 0; i < 8; i++) buf[2 + i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 0xF];
  buf[10] = 0;
  sh_puts(buf);
}

/* ------------------------------------------------------------------ */
/* Reset and exceptions.                                               */

/* Runs on the handler stack (MSP) before anything else. */
void board_early_init(void) __attribute__((used));
void board_early_init(void) {
  /* Full access to CP10/CP11 (the FPU).  Done whatever the float ABI of this
   * firmware: a bundle built with LLVM's softfp ABI may still use FPU
   * instructions, and on a core without FPU the bits are RAZ/WI. */
  SCB_CPACR |= (0xFu << 20);
  __asm__ volatile("dsb\n\tisb" ::: "memory");

  for (uint32_t *src = __data_load__, *dst = __data_start__; dst < __data_end__;) *dst++ = *src++;
  for (uint32_t *p = __bss_start__; p < __bss_end__;) *p++ = 0;
  for (uint32_t *p = __model_start__; p < __model_end__;) *p++ = 0;
  for (volatile uint32_t *p = __StackLimit; p < __StackTop;) *p++ = STACK_PAINT;

#if STACK_LIMIT_REGISTERS
  /* The handler stack's limit (the process stack's is set in Reset_Handler,
   * before thread mode switches to it). */
  __asm__ volatile("msr msplim, %0" ::"r"(__HandlerStackLimit));
#else
  /* MPU region 0: no access (privileged or not), execute never, over the
   * 16 MiB below RAM; the default memory map elsewhere (PRIVDEFENA). */
  MPU_RNR = 0;
  MPU_RBAR = STACK_GUARD_BASE;
  MPU_RASR = (1u << 28) /* XN */ | (0u << 24) /* AP: no access */ |
             ((STACK_GUARD_SIZE_LOG2 - 1u) << 1) | 1u /* ENABLE */;
  MPU_CTRL = (1u << 2) /* PRIVDEFENA */ | 1u /* ENABLE */;
#endif
  /* Usage, bus and memory-management faults get their own handlers. */
  SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18);
  __asm__ volatile("dsb\n\tisb" ::: "memory");
}

/* Runs on the process stack (PSP). */
void board_main(void) __attribute__((used, noreturn));
void board_main(void) {
  initialise_monitor_handles();
  exit(main());
}

#if STACK_LIMIT_REGISTERS
#define SET_PSPLIM "ldr r0, =__StackLimit\n\tmsr psplim, r0\n\t"
#else
#define SET_PSPLIM ""
#endif

void Reset_Handler(void) __attribute__((naked, noreturn));
void Reset_Handler(void) {
  __asm__ volatile(
      "bl board_early_init\n\t" SET_PSPLIM
      "ldr r0, =__StackTop\n\t"
      "msr psp, r0\n\t"
      "movs r0, #2\n\t" /* CONTROL.SPSEL = 1: thread mode uses PSP */
      "msr control, r0\n\t"
      "isb\n\t"
      "bl board_main\n\t"
      "b .\n\t"
      ".ltorg\n\t");
}

static void fault(const char *what, uint32_t *frame) __attribute__((noreturn));
static void fault(const char *what, uint32_t *frame) {
  uint32_t cfsr = SCB_CFSR, mmfar = SCB_MMFAR;
  MPU_CTRL = 0; /* the report must not fault again */
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  /* After a stacking error or a stack limit violation the frame was never
   * (completely) written. */
  int frame_ok = frame && !(cfsr & (CFSR_MSTKERR | CFSR_STKERR | CFSR_STKOF)) &&
                 !((uint32_t)frame >= STACK_GUARD_BASE && (uint32_t)frame < (uint32_t)__StackLimit);
  int overflow = (cfsr & (CFSR_MSTKERR | CFSR_STKERR | CFSR_STKOF)) ||
                 ((cfsr & (1u << 7)) /* MMARVALID */ && mmfar >= STACK_GUARD_BASE &&
                  mmfar < (uint32_t)__StackLimit);
  sh_puts("fault ");
  sh_puts(what);
  sh_puts(" pc=");
  sh_hex(frame_ok ? frame[6] : 0);
  sh_puts(" lr=");
  sh_hex(frame_ok ? frame[5] : 0);
  sh_puts(" cfsr=");
  sh_hex(cfsr);
  sh_puts(" hfsr=");
  sh_hex(SCB_HFSR);
  sh_puts(" bfar=");
  sh_hex(SCB_BFAR);
  sh_puts(" mmfar=");
  sh_hex(mmfar);
  if (overflow) sh_puts(" (stack overflow)");
  sh_puts("\n");
  sh_exit(3);
}

/* The exception frame is on MSP or PSP depending on EXC_RETURN bit 2. */
#define FAULT_HANDLER(name, text)                                          \
  void name(void) __attribute__((naked));                                  \
  void name(void) {                                                        \
    __asm__ volatile("tst lr, #4\n\t"                                      \
                     "ite eq\n\t"                                          \
                     "mrseq r1, msp\n\t"                                   \
                     "mrsne r1, psp\n\t"                                   \
                     "ldr r0, =" #name "_text\n\t"                         \
                     "b fault_trampoline\n\t");                            \
  }                                                                        \
  const char name##_text[] = text;

void fault_trampoline(const char *what, uint32_t *frame) __attribute__((used, noreturn));
void fault_trampoline(const char *what, uint32_t *frame) { fault(what, frame); }

FAULT_HANDLER(HardFault_Handler, "HardFault")
FAULT_HANDLER(MemManage_Handler, "MemManage")
FAULT_HANDLER(BusFault_Handler, "BusFault")
FAULT_HANDLER(UsageFault_Handler, "UsageFault")

void Default_Handler(void) {
  uint32_t ipsr;
  __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
  sh_puts("fault unexpected exception ");
  sh_hex(ipsr & 0x1FF);
  sh_puts("\n");
  sh_exit(3);
}

static volatile uint32_t systick_wraps;

void SysTick_Handler(void) { systick_wraps++; }

void NMI_Handler(void) __attribute__((weak, alias("Default_Handler")));
void SVC_Handler(void) __attribute__((weak, alias("Default_Handler")));
void DebugMon_Handler(void) __attribute__((weak, alias("Default_Handler")));
void PendSV_Handler(void) __attribute__((weak, alias("Default_Handler")));

typedef void (*vector_t)(void);

/* 16 system exceptions + 32 external interrupts (the runner enables none). */
__attribute__((section(".isr_vector"), used)) const vector_t vector_table[16 + 32] = {
    (vector_t)(uintptr_t)__HandlerStackTop, /* MSP: handler stack */
    Reset_Handler,
    NMI_Handler,
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    0, 0, 0, 0,
    SVC_Handler,
    DebugMon_Handler,
    0,
    PendSV_Handler,
    SysTick_Handler,
    [16 ... 47] = Default_Handler,
};

/* ------------------------------------------------------------------ */
/* SysTick cycle counter.                                              */

void cycles_start(void) {
  SYST_CSR = 0;
  systick_wraps = 0;
  SYST_RVR = SYSTICK_RELOAD;
  SYST_CVR = 0; /* any write clears the counter; it reloads on the next tick */
  /* CLKSOURCE = processor clock, TICKINT, ENABLE */
  SYST_CSR = (1u << 2) | (1u << 1) | 1u;
}

uint64_t cycles_now(void) {
  uint32_t primask;
  __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask)::"memory");
  uint32_t wraps = systick_wraps;
  uint32_t val = SYST_CVR;
  if (SCB_ICSR & ICSR_PENDSTSET) {
    /* The counter wrapped but the interrupt has not run yet. */
    val = SYST_CVR;
    wraps++;
  }
  __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory");
  return (uint64_t)wraps * (SYSTICK_RELOAD + 1u) + (SYSTICK_RELOAD - val);
}

/* ------------------------------------------------------------------ */
/* Stack measurement.                                                  */

uint32_t board_stack_size(void) { return (uint32_t)((char *)__StackTop - (char *)__StackLimit); }

__attribute__((noinline)) void stack_paint(void) {
  uint32_t *limit = (uint32_t *)((get_sp() - 16u) & ~3u);
  for (volatile uint32_t *p = __StackLimit; p < limit;) *p++ = STACK_PAINT;
}

uint32_t stack_high_water(void) {
  const uint32_t *p = __StackLimit;
  while (p < __StackTop && *p == STACK_PAINT) p++;
  return (uint32_t)((const char *)__StackTop - (const char *)p);
}

int stack_overflowed(void) { return __StackLimit[0] != STACK_PAINT; }

/* ------------------------------------------------------------------ */
/* Small printing helpers (newlib-nano's printf lacks %llu).           */

void print_u64(uint64_t v) {
  char buf[21];
  int i = 20;
  buf[i] = 0;
  do {
    buf[--i] = (char)('0' + (int)(v % 10u));
    v /= 10u;
  } while (v);
  fputs(buf + i, stdout);
}

void print_i64(int64_t v) {
  if (v < 0) {
    fputc('-', stdout);
    print_u64((uint64_t)0 - (uint64_t)v);
  } else {
    print_u64((uint64_t)v);
  }
}

/* ------------------------------------------------------------------ */
/* Heap for newlib (the library's weak _sbrk would compare against the
 * stack pointer, which is below the heap in this memory layout). */

void *_sbrk(ptrdiff_t incr) {
  static char *brk = __HeapBase;
  if (incr < 0 ? (brk + incr < __HeapBase) : (incr > __HeapLimit - brk)) {
    errno = ENOMEM;
    return (void *)-1;
  }
  char *prev = brk;
  brk += incr;
  return prev;
}
