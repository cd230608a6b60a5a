# muster: one Makefile for every program, the library, tests and benchmarks.

PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
MANDIR    ?= $(PREFIX)/share/man
DESTDIR   ?=
VERSION   := 0.1.0

CC        ?= cc
CFLAGS    ?= -std=c11 -O2 -g -Wall -Wextra -Werror
CPPFLAGS  += -D_GNU_SOURCE -DMUSTER_VERSION='"$(VERSION)"' -Ilib
PKGS      := libmicrohttpd jansson
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) libcurl 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CURL_LIBS  = $(shell pkg-config --libs libcurl 2>/dev/null)
LDLIBS    += $(PKG_LIBS) -lpthread -lm
# Clients load only what they use: a process start is most of a kvctl call.
LDFLAGS   += -Wl,--as-needed

# SANITIZER=address|undefined builds everything into its own tree.
ifdef SANITIZER
BUILD     ?= build-$(SANITIZER)
CFLAGS    += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -O1
LDFLAGS   += -fsanitize=$(SANITIZER)
else
BUILD     ?= build
endif

PROGS     := coordd kvctl barrierwait preemptwatch syncpoint
MAN1      := kvctl.1 barrierwait.1 preemptwatch.1 syncpoint.1
MAN8      := coordd.8
LIB_SRC   := $(wildcard lib/*.c)
LIB_OBJ   := $(LIB_SRC:lib/%.c=$(BUILD)/lib/%.o)
UNIT_SRC  := $(wildcard test/unit/*.c)
UNIT_OBJ  := $(UNIT_SRC:test/unit/%.c=$(BUILD)/unit/%.o)
BENCH_PROGS := bare loadgen syncapi
BINS      := $(PROGS:%=$(BUILD)/bin/%)

.DELETE_ON_ERROR:
.SECONDARY:
.PHONY: all deps check unit asan ubsan bench demo install uninstall clean lint

all: deps $(BINS)

# Stops early with the exact install command when a Debian package is missing.
deps:
	@./test/deps.sh build

$(BUILD)/lib/%.o: lib/%.c | $(BUILD)/lib
	$(CC) $(CPPFLAGS) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/cmd/%.o: cmd/%.c | $(BUILD)/cmd
	$(CC) $(CPPFLAGS) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/unit/%.o: test/unit/%.c | $(BUILD)/unit
	$(CC) $(CPPFLAGS) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/bench/%.o: bench/%.c | $(BUILD)/bench
	$(CC) $(CPPFLAGS) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libmuster.a: $(LIB_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/bin/%: $(BUILD)/cmd/%.o $(BUILD)/libmuster.a | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/unit: $(UNIT_OBJ) $(BUILD)/libmuster.a | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The load generator drives thousands of requests with libcurl's multi API.
$(BUILD)/bin/bench-%: $(BUILD)/bench/%.o $(BUILD)/libmuster.a | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CURL_LIBS)

$(BUILD)/lib $(BUILD)/cmd $(BUILD)/unit $(BUILD)/bench $(BUILD)/bin:
	@mkdir -p $@

unit: deps $(BUILD)/bin/unit
	$(BUILD)/bin/unit

# The whole suite: C unit tests, then every bats file, as TAP.
check: deps $(BINS) $(BUILD)/bin/unit
	@./test/deps.sh test
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin ./test/run.sh

asan:
	$(MAKE) SANITIZER=address check

ubsan:
	$(MAKE) SANITIZER=undefined check

bench: deps $(BINS) $(BENCH_PROGS:%=$(BUILD)/bin/bench-%)
	@./test/deps.sh bench
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin ./bench/run.sh

# The README's first command: a 4-task job survives a preemption.
demo: deps $(BINS)
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin ./examples/demo.sh

lint:
	mandoc -Tlint -W warning $(addprefix man/,$(MAN1) $(MAN8))

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(addprefix man/,$(MAN1)) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(addprefix man/,$(MAN8)) $(DESTDIR)$(MANDIR)/man8/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PROGS))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(MAN1))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(MAN8))

clean:
	rm -rf build build-address build-undefined

-include $(wildcard $(BUILD)/*/*.d)
