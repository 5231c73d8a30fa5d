/*
 * One L(NAME, value) per number prescient.ko uses (included by layouts.c); NAME becomes
 * UVM_L_NAME in kmod/layout/uvm<branch>.h, in this order; S(text) a section comment there.
 * A member the branch lacks is A(NAME) (UVM_L_ABSENT, -1); PRESCIENT_NV_MAJOR (the driver
 * branch, from uvm-layouts.sh) or a macro of the driver's says which branch has what.
 */
S(uvm_perf_event_t);
L(PERF_EVENT_FAULT, UVM_PERF_EVENT_FAULT);
L(PERF_EVENT_MIGRATION, UVM_PERF_EVENT_MIGRATION);
S(uvm_perf_event_data_t);
L(EVENT_DATA_SIZE, sizeof(uvm_perf_event_data_t));
#if PRESCIENT_NV_MAJOR < 580 /* fault.space went away in 580.65.06 */
L(FAULT_SPACE, OFF(uvm_perf_event_data_t, fault.space));
#else
A(FAULT_SPACE);
#endif
L(FAULT_BLOCK, OFF(uvm_perf_event_data_t, fault.block));
L(FAULT_PROC_ID, OFF(uvm_perf_event_data_t, fault.proc_id));
L(FAULT_PREFERRED_LOCATION, OFF(uvm_perf_event_data_t, fault.preferred_location));
L(FAULT_GPU_BUFFER_ENTRY, OFF(uvm_perf_event_data_t, fault.gpu.buffer_entry));
L(FAULT_GPU_BATCH_ID, OFF(uvm_perf_event_data_t, fault.gpu.batch_id));
L(FAULT_CPU_FAULT_VA, OFF(uvm_perf_event_data_t, fault.cpu.fault_va));
#if PRESCIENT_NV_MAJOR >= 565 /* cpu.cpu_num came in 565 */
L(FAULT_CPU_CPU_NUM, OFF(uvm_perf_event_data_t, fault.cpu.cpu_num));
#else
A(FAULT_CPU_CPU_NUM);
#endif
L(FAULT_CPU_IS_WRITE, OFF(uvm_perf_event_data_t, fault.cpu.is_write));
L(FAULT_CPU_PC, OFF(uvm_perf_event_data_t, fault.cpu.pc));
L(MIGRATION_BLOCK, OFF(uvm_perf_event_data_t, migration.block));
L(MIGRATION_DST, OFF(uvm_perf_event_data_t, migration.dst));
L(MIGRATION_SRC, OFF(uvm_perf_event_data_t, migration.src));
L(MIGRATION_ADDRESS, OFF(uvm_perf_event_data_t, migration.address));
L(MIGRATION_BYTES, OFF(uvm_perf_event_data_t, migration.bytes));
L(MIGRATION_TRANSFER_MODE, OFF(uvm_perf_event_data_t, migration.transfer_mode));
L(MIGRATION_CAUSE, OFF(uvm_perf_event_data_t, migration.cause));
L(MIGRATION_MAKE_RESIDENT_CONTEXT, OFF(uvm_perf_event_data_t, migration.make_resident_context));
S(uvm_processor_id_t of the CPU; uvm_make_resident_cause_t EVICTION);
L(ID_CPU, UVM_ID_CPU_VALUE);
L(CAUSE_EVICTION, UVM_MAKE_RESIDENT_CAUSE_EVICTION);
S(uvm_fault_buffer_entry_t);
L(ENTRY_TIMESTAMP, OFF(uvm_fault_buffer_entry_t, timestamp));
L(ENTRY_VA_SPACE, OFF(uvm_fault_buffer_entry_t, va_space));
S(uvm_thread_context_t, and the wrapper used iff UVM_IS_DEBUG() || uvm_enable_builtin_tests);
L(THREAD_CONTEXT_SIZE, sizeof(uvm_thread_context_t));
L(THREAD_CONTEXT_WRAPPER_SIZE, sizeof(uvm_thread_context_wrapper_t));
S(UVM_MIGRATE_PARAMS (uvm_api_migrate));
L(MIGRATE_SIZE, sizeof(UVM_MIGRATE_PARAMS));
L(MIGRATE_BASE, OFF(UVM_MIGRATE_PARAMS, base));
L(MIGRATE_LENGTH, OFF(UVM_MIGRATE_PARAMS, length));
L(MIGRATE_DESTINATION_UUID, OFF(UVM_MIGRATE_PARAMS, destinationUuid));
L(MIGRATE_FLAGS, OFF(UVM_MIGRATE_PARAMS, flags));
L(MIGRATE_SEMAPHORE_ADDRESS, OFF(UVM_MIGRATE_PARAMS, semaphoreAddress));
L(MIGRATE_SEMAPHORE_PAYLOAD, OFF(UVM_MIGRATE_PARAMS, semaphorePayload));
L(MIGRATE_CPU_NUMA_NODE, OFF(UVM_MIGRATE_PARAMS, cpuNumaNode));
L(MIGRATE_USER_SPACE_START, OFF(UVM_MIGRATE_PARAMS, userSpaceStart));
L(MIGRATE_USER_SPACE_LENGTH, OFF(UVM_MIGRATE_PARAMS, userSpaceLength));
L(MIGRATE_RM_STATUS, OFF(UVM_MIGRATE_PARAMS, rmStatus));
L(MIGRATE_FLAG_ASYNC, UVM_MIGRATE_FLAG_ASYNC);
S(UVM_DISCARD_PARAMS (uvm_api_discard; from 580.65.06));
#ifdef UVM_DISCARD
L(HAS_DISCARD, 1);
L(DISCARD_SIZE, sizeof(UVM_DISCARD_PARAMS));
L(DISCARD_BASE, OFF(UVM_DISCARD_PARAMS, base));
L(DISCARD_LENGTH, OFF(UVM_DISCARD_PARAMS, length));
L(DISCARD_FLAGS, OFF(UVM_DISCARD_PARAMS, flags));
L(DISCARD_RM_STATUS, OFF(UVM_DISCARD_PARAMS, rmStatus));
#else
L(HAS_DISCARD, 0);
A(DISCARD_SIZE);
A(DISCARD_BASE);
A(DISCARD_LENGTH);
A(DISCARD_FLAGS);
A(DISCARD_RM_STATUS);
#endif
S(uvm_fd_type_t: file->private_data = pointer | type in the low bits);
L(FD_VA_SPACE, UVM_FD_VA_SPACE);
L(FD_TYPE_MASK, UVM_FD_TYPE_MASK);
S(the faulting GPU of a GPU fault, through what the driver holds for the VA space of the fault);
L(VA_SPACE_REGISTERED_GPUS, OFF(uvm_va_space_t, registered_gpus));
L(ID_MAX_PROCESSORS, UVM_ID_MAX_PROCESSORS);
L(ID_GPU0, UVM_ID_GPU0_VALUE);
#if PRESCIENT_NV_MAJOR < 570 /* 550: the space's own uvm_gpu_t table; gone by 570 */
L(VA_SPACE_REGISTERED_GPUS_TABLE, OFF(uvm_va_space_t, registered_gpus_table));
A(ENTRY_GPU);
#else /* 570 on: each fault entry names its uvm_gpu_t */
A(VA_SPACE_REGISTERED_GPUS_TABLE);
L(ENTRY_GPU, OFF(uvm_fault_buffer_entry_t, gpu));
#endif
L(GPU_ID, OFF(uvm_gpu_t, id));
L(GPU_UUID, OFF(uvm_gpu_t, uuid));
