// Architecture-specific entry for clone3 with a child stack (see the header).
// In the child the kernel has switched to the new stack; registers other than
// the return value are those of the parent, so fn and arg survive the call.
#include "kernel/clone_trampoline.h"

#if defined(__x86_64__)
// rdi = cl_args, rsi = size, rdx = fn, rcx = arg. syscall clobbers rcx and
// r11, so arg moves to r8 first; rdx survives.
__asm__(
    ".text\n"
    ".globl proctree_clone3\n"
    ".hidden proctree_clone3\n"
    ".type proctree_clone3,@function\n"
    "proctree_clone3:\n"
    "  mov %rcx, %r8\n"
    "  mov $435, %eax\n"  // __NR_clone3
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  xor %ebp, %ebp\n"
    "  and $-16, %rsp\n"
    "  mov %r8, %rdi\n"
    "  call *%rdx\n"
    "  mov %eax, %edi\n"
    "  mov $60, %eax\n"  // __NR_exit
    "  syscall\n"
    "  hlt\n"
    ".size proctree_clone3, .-proctree_clone3\n");
#elif defined(__aarch64__)
// x0 = cl_args, x1 = size, x2 = fn, x3 = arg; svc preserves x1..x7.
__asm__(
    ".text\n"
    ".globl proctree_clone3\n"
    ".hidden proctree_clone3\n"
    ".type proctree_clone3,%function\n"
    "proctree_clone3:\n"
    "  mov x8, #435\n"  // __NR_clone3
    "  svc #0\n"
    "  cbz x0, 1f\n"
    "  ret\n"
    "1:\n"
    "  mov x29, #0\n"
    "  mov x30, #0\n"
    "  mov x0, x3\n"
    "  blr x2\n"
    "  mov x8, #93\n"  // __NR_exit
    "  svc #0\n"
    "  brk #0\n"
    ".size proctree_clone3, .-proctree_clone3\n");
#else
#error "proctree supports x86_64 and aarch64 only"
#endif
