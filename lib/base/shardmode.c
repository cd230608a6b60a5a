#include <string.h>

#include "shardmode.h"

static const char *const names[SHARD_MODES] = {"off", "dynamic", "file", "data",
    "file_or_data", "hint"};

const char *
shard_mode_name(enum shard_mode m)
{
	return (unsigned)m < SHARD_MODES ? names[m] : NULL;
}

int
shard_mode_parse(const char *s, enum shard_mode *m)
{
	for (int i = 0; s != NULL && i < SHARD_MODES; i++)
		if (strcmp(s, names[i]) == 0) {
			*m = (enum shard_mode)i;
			return 0;
		}
	return -1;
}
