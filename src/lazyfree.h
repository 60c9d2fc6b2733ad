/* lazyfree.h -- FLUSHALL ASYNC's slices (design: lazyfree.c). */
#ifndef LAZYFREE_H
#define LAZYFREE_H

#include "dict.h"

/* Takes a detached dict, to be freed in slices with its entries' own
 * destructors; the keyspace form counts its entries as pending objects. */
void storeLazyFreeTake(dict *d);
void storeLazyFreeTakeKeyspace(dict *d);
/* Starts the slicing timer if anything was taken and it is not running. */
void storeLazyFreeStart(void);
/* A slice within budget_us (the cron). */
void storeLazyFreeCron(long long budget_us);
/* Frees some of what is pending: 1 if there was any (the caller may retry
 * its allocation), 0 if nothing is pending. */
int storeLazyFreeMakeRoom(void);
/* Keyspace entries not yet freed (INFO lazyfree_pending_objects). */
unsigned long long storeLazyFreePending(void);

#endif
