// SPDX-License-Identifier: GPL-2.0
/* The nvidia-uvm 550 branch's layout (kmod/layout/uvm550.h) as a struct uvm_layout. */
#include "layout/uvm550.h"
#include "uvm.h"

UVM_LAYOUT_FROM_HEADER(uvm_layout_550);
