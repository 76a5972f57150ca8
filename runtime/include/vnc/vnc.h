/* vnc/vnc.h — the virtual NeuronCore runtime: one include for the whole public C API. */
#ifndef VNC_VNC_H
#define VNC_VNC_H
#include "status.h"
#include "tensor.h"
#include "device.h"
#include "memory.h"
#include "stream.h"
#include "threadpool.h"
#include "kernels.h"
#include "iter.h"
#include "elementwise.h"
#include "reduce.h"
#include "gemm.h"
#include "nn.h"
#include "conv.h"
#include "index.h"
#include "optim.h"
#include "attention.h"
#include "sort.h"
#include "scan.h"
#include "vision.h"
#endif
