// SPDX-License-Identifier: GPL-2.0
/*
 * The offsets, sizes and constants prescient.ko reads from nvidia-uvm, computed by the
 * driver's own headers and compiler flags (kbuild's asm-offsets trick): each L() becomes a
 * line "->#define UVM_L_<NAME> <value>" in the assembler output, which uvm-layouts.sh turns into
 * kmod/layout/uvm<branch>.h. Never compiled into anything; only its .s is read.
 */
#include "uvm_common.h"
#include "uvm_perf_events.h"
#include "uvm_va_block.h"
#include "uvm_va_block_types.h"
#include "uvm_hal_types.h"
#include "uvm_thread_context.h"
#include "uvm_processors.h"
#include "uvm_ioctl.h"
#include "uvm_va_space.h"

#define L(sym, val) \
	asm volatile("\n.ascii \"->#define UVM_L_" #sym " %c0\"" : : "i"((long)(val)))
#define A(sym) asm volatile("\n.ascii \"->#define UVM_L_" #sym " (-1)\"")
#define S(...) asm volatile("\n.ascii \"->/* " #__VA_ARGS__ " */\"")
#define OFF(type, member) offsetof(type, member)

void prescient_layouts(void);
void prescient_layouts(void)
{
#include "fields.h"
}
