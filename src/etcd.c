/* etcd.c -- placeholder: being written (see etcd.h). */
#include "etcd.h"
