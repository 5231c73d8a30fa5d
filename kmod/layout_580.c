// SPDX-License-Identifier: GPL-2.0
/* The nvidia-uvm 580 branch's layout (kmod/layout/uvm580.h) as a struct uvm_layout. */
#include "layout/uvm580.h"
#include "uvm.h"

UVM_LAYOUT_FROM_HEADER(uvm_layout_580);
