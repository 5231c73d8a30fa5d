// SPDX-License-Identifier: GPL-2.0
/*
 * A GPU-less stand-in for nvidia.ko under the REAL nvidia-uvm: with zero GPUs, nvidia-uvm calls
 * only these four of its nvUvmInterface* imports (uvm_global.c: session create/destroy, the
 * callback registration and its undo; ../shared/notes/real-uvm.md Q3). Built with the driver's
 * own common/inc type headers so the argument types (UvmPlatformInfo's size) are the driver's. Every other import is in
 * stub_gen.c (generated from nvidia-uvm.o's undefined symbols), returning NV_ERR_NOT_SUPPORTED.
 */
#include <linux/module.h>
#include <linux/string.h>
#include "nv_uvm_types.h" /* the driver's own types (its nv_uvm_interface.h needs the whole driver) */

/* the prototypes, as nv_uvm_interface.h declares them */
NV_STATUS nvUvmInterfaceSessionCreate(uvmGpuSessionHandle *session, UvmPlatformInfo *platformInfo);
NV_STATUS nvUvmInterfaceSessionDestroy(uvmGpuSessionHandle session);
NV_STATUS nvUvmInterfaceRegisterUvmCallbacks(struct UvmOpsUvmEvents *importedUvmOps);
void nvUvmInterfaceDeRegisterUvmOps(void);

static int session_token;

NV_STATUS nvUvmInterfaceSessionCreate(uvmGpuSessionHandle *session, UvmPlatformInfo *platformInfo)
{
	memset(platformInfo, 0, sizeof(*platformInfo)); /* no ATS, no confidential computing */
	*session = (uvmGpuSessionHandle)&session_token;
	pr_info("nvidia stub: SessionCreate\n");
	return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceSessionCreate);

NV_STATUS nvUvmInterfaceSessionDestroy(uvmGpuSessionHandle session)
{
	pr_info("nvidia stub: SessionDestroy\n");
	return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceSessionDestroy);

NV_STATUS nvUvmInterfaceRegisterUvmCallbacks(struct UvmOpsUvmEvents *importedUvmOps)
{
	pr_info("nvidia stub: RegisterUvmCallbacks\n");
	return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceRegisterUvmCallbacks);

void nvUvmInterfaceDeRegisterUvmOps(void)
{
	pr_info("nvidia stub: DeRegisterUvmOps\n");
}
EXPORT_SYMBOL(nvUvmInterfaceDeRegisterUvmOps);

MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("Prescient test stub for nvidia.ko: no GPU, for the real nvidia-uvm in QEMU");
