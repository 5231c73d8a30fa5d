/*
 * A stand-in for libnvidia-ml.so.1 for prescientd's tests, written from
 * NVML's documented API (nvml.h, the NVML API Reference): the same symbol
 * names, signatures, return codes and buffer rules. Its behaviour is chosen
 * per test when it is compiled (each scenario is its own .so, since one
 * process loads a path only once):
 *   -DFAKE_GPUS=N       number of GPUs (default 1)
 *   -DFAKE_FAIL='"f"'   the name of one call that returns FAKE_CODE
 *   -DFAKE_CODE=N       the nvmlReturn_t it returns (default 999, UNKNOWN)
 * GPU i has 80 GiB + i MiB of memory, UUID GPU-fa4e0000-0000-0000-0000-00000000000i
 * and the name "Fake NVIDIA H100 80GB HBM3".
 */
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_UNKNOWN = 999,
};

static int initialised;
static struct nvmlDevice_st { unsigned index; } devices[16];

#ifndef FAKE_GPUS
#define FAKE_GPUS 1
#endif
#ifndef FAKE_FAIL
#define FAKE_FAIL ""
#endif
#ifndef FAKE_CODE
#define FAKE_CODE NVML_ERROR_UNKNOWN
#endif

static int gpus(void)
{
	return FAKE_GPUS < 0 ? 0 : FAKE_GPUS > 16 ? 16 : FAKE_GPUS;
}

/* The injected failure of `call`, or NVML_SUCCESS. */
static nvmlReturn_t injected(const char *call)
{
	return strcmp(FAKE_FAIL, call) == 0 ? FAKE_CODE : NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

nvmlReturn_t nvmlInit_v2(void)
{
	nvmlReturn_t r = injected("nvmlInit_v2");
	if (r == NVML_SUCCESS)
		initialised++;
	return r;
}

nvmlReturn_t nvmlShutdown(void)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	initialised--;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = injected("nvmlDeviceGetCount_v2");
	if (r == NVML_SUCCESS)
		*count = gpus();
	return r;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= (unsigned)gpus())
		return NVML_ERROR_INVALID_ARGUMENT;
	devices[index].index = index;
	*device = &devices[index];
	return injected("nvmlDeviceGetHandleByIndex_v2");
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || !memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = injected("nvmlDeviceGetMemoryInfo");
	if (r != NVML_SUCCESS)
		return r;
	memory->total = (80ULL << 30) + ((unsigned long long)device->index << 20);
	memory->used = 1ULL << 30;
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}

/* Copies `s` into `buf` of `length` bytes as NVML does: the whole string
 * and its NUL, or INSUFFICIENT_SIZE. */
static nvmlReturn_t copy_out(const char *s, char *buf, unsigned int length)
{
	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char s[96];
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!device)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = injected("nvmlDeviceGetUUID");
	if (r != NVML_SUCCESS)
		return r;
	snprintf(s, sizeof s, "GPU-fa4e0000-0000-0000-0000-%012u", device->index);
	return copy_out(s, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!device)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = injected("nvmlDeviceGetName");
	if (r != NVML_SUCCESS)
		return r;
	return copy_out("Fake NVIDIA H100 80GB HBM3", name, length);
}
