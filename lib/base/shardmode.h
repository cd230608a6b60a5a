/*
 * shardmode.h: how a job's splits are shared among the workers that read
 * them (tf.data service's sharding policies), and the names the wire, the
 * command line and the state use for them.
 */
#ifndef MUSTER_SHARDMODE_H
#define MUSTER_SHARDMODE_H

enum shard_mode {
	SHARD_OFF,          /* every worker reads every split */
	SHARD_DYNAMIC,      /* splits leased one by one to whoever asks */
	SHARD_FILE,         /* worker i of n reads splits i, i + n, ... */
	SHARD_DATA,         /* every split, keeping element i of every n */
	SHARD_FILE_OR_DATA, /* FILE with as many splits as workers, else DATA */
	SHARD_HINT,         /* FILE, the reader told its index and count */
	SHARD_MODES
};

/* "off", "dynamic", "file", "data", "file_or_data", "hint"; NULL beyond. */
const char *shard_mode_name(enum shard_mode m);

/* The mode named s: 0, or -1 (and *m untouched) for no such name. */
int shard_mode_parse(const char *s, enum shard_mode *m);

#endif
