# muster: one Makefile for every program, the library, tests and benchmarks.

PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
LIBDIR    ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR    ?= $(PREFIX)/share/man
# Debian's python3 (the one with torch) looks in PREFIX/lib/pythonX.Y/dist-packages.
PYTHON    ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
PYTHONDIR ?= $(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)/dist-packages
DESTDIR   ?=
VERSION   := 0.1.0

CC        ?= cc
CFLAGS    ?= -std=c11 -O2 -g -Wall -Wextra -Werror
CPPFLAGS  += -D_GNU_SOURCE -DMUSTER_VERSION='"$(VERSION)"'
PKG_CFLAGS = $(shell pkg-config --cflags libmicrohttpd jansson libcurl gnutls 2>/dev/null)
JSON_LIBS  = $(shell pkg-config --libs jansson 2>/dev/null)
# Servers link GnuTLS (libmicrohttpd's HTTPS); clients load it with dlopen,
# and only for an https:// address.
HTTPD_LIBS = $(shell pkg-config --libs libmicrohttpd gnutls 2>/dev/null)
CURL_LIBS  = $(shell pkg-config --libs libcurl 2>/dev/null)
SYS_LIBS   = -lpthread -lm
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

# The library's layers, lowest first. Each is an archive of its own, and
# each may use only the layers listed for it: its objects are compiled with
# only their headers on the include path, and `make layers` links every
# object of a layer against the layers below it alone, so that an upward
# call is a build error. Servers (svc) and clients (client) never meet.
LAYERS       := base io state client svc
USES_base    := base
USES_io      := io base
USES_state   := state base
USES_client  := client io base
USES_svc     := svc state io base
# What each layer's objects need from the system besides libc.
SYSLIBS_base   = $(JSON_LIBS) $(SYS_LIBS)
SYSLIBS_io     = $(HTTPD_LIBS) $(JSON_LIBS) $(SYS_LIBS)
SYSLIBS_state  = $(JSON_LIBS) $(SYS_LIBS)
# Clients never link libmicrohttpd: a client that reached the HTTP server
# would fail to link.
SYSLIBS_client = $(JSON_LIBS) $(SYS_LIBS) -ldl
SYSLIBS_svc    = $(HTTPD_LIBS) $(JSON_LIBS) $(SYS_LIBS)

layer_src  = $(wildcard lib/$(1)/*.c)
layer_obj  = $(patsubst lib/$(1)/%.c,$(BUILD)/lib/$(1)/%.o,$(call layer_src,$(1)))
layer_lib  = $(BUILD)/lib/lib$(1).a
layer_inc  = $(foreach l,$(USES_$(1)),-Ilib/$(l))
ALL_INC   := $(foreach l,$(LAYERS),-Ilib/$(l))

# Programs, and the layers each links (highest first, as the linker wants).
SERVERS   := coordd dispatchd
CLIENTS   := kvctl barrierwait preemptwatch syncpoint workerloop dispatchctl
PROGS     := $(SERVERS) $(CLIENTS)
SERVER_ARCHIVES = $(call layer_lib,svc) $(call layer_lib,state) \
	$(call layer_lib,io) $(call layer_lib,base)
CLIENT_ARCHIVES = $(call layer_lib,client) $(call layer_lib,io) \
	$(call layer_lib,base)
ALL_ARCHIVES = $(call layer_lib,svc) $(call layer_lib,state) \
	$(call layer_lib,client) $(call layer_lib,io) $(call layer_lib,base)

MAN1      := kvctl.1 barrierwait.1 preemptwatch.1 syncpoint.1 workerloop.1 dispatchctl.1
MAN8      := coordd.8 dispatchd.8
# The syncpoint C API alone, as a shared library for any language (Python
# through ctypes, say): position-independent, built without sanitizers so
# that any process may load it, and exporting syncpoint_* only.
SYNCLIB   := $(BUILD)/lib/libmuster-syncpoint.so.0
SYNCLIB_OBJ := $(BUILD)/pic/syncpoint.o $(BUILD)/pic/sync_page.o
# The data consumer's C API (datapos.h: positions, and the reader of a
# positioned stream) likewise, linked with jansson, exporting datapos_*.
DATALIB   := $(BUILD)/lib/libmuster-data.so.0
DATALIB_OBJ := $(BUILD)/pic/datapos.o $(BUILD)/pic/base/vec.o \
	$(BUILD)/pic/base/splitorder.o $(BUILD)/pic/base/span.o \
	$(BUILD)/pic/base/errbuf.o
PIC_CFLAGS = $(filter-out -fsanitize=% -fno-omit-frame-pointer,$(CFLAGS)) -fPIC
PIC_LDFLAGS = $(filter-out -fsanitize=%,$(LDFLAGS))

UNIT_SRC  := $(wildcard test/unit/*.c)
UNIT_OBJ  := $(UNIT_SRC:test/unit/%.c=$(BUILD)/unit/%.o)
BENCH_PROGS := bare loadgen syncapi spawnloop stamp
# Programs the bats tests drive (test/*.c), linked as clients are.
TEST_PROGS := $(patsubst test/%.c,$(BUILD)/bin/%,$(wildcard test/*.c))
BINS      := $(PROGS:%=$(BUILD)/bin/%)

.DELETE_ON_ERROR:
.SECONDARY:
.PHONY: FORCE all deps layers check unit asan ubsan bench demo install uninstall \
	clean lint format example-ddp fuzz fuzz-build fuzz-bins

all: deps layers $(BINS) $(SYNCLIB) $(DATALIB)

# Stops early with the exact install command when a Debian package is missing.
deps:
	@./test/deps.sh build

define layer_rules
$(BUILD)/lib/$(1)/%.o: lib/$(1)/%.c | $(BUILD)/lib/$(1)
	$$(CC) $$(CPPFLAGS) $(call layer_inc,$(1)) $$(PKG_CFLAGS) $$(CFLAGS) \
		-MMD -MP -c -o $$@ $$<

# The archive is made anew whenever its list of objects changes, so that a
# removed source file leaves nothing behind in it.
$(BUILD)/lib/$(1).objs: FORCE | $(BUILD)/lib/$(1)
	@echo '$(call layer_obj,$(1))' >$$@.new
	@cmp -s $$@.new $$@ && rm -f $$@.new || mv $$@.new $$@

$(call layer_lib,$(1)): $(call layer_obj,$(1)) $(BUILD)/lib/$(1).objs
	@rm -f $$@
	$$(AR) rcs $$@ $(call layer_obj,$(1))

$(BUILD)/lib/$(1):
	@mkdir -p $$@

# Every object of the layer, linked with the layers below it and nothing
# above: an undefined symbol here is a call upward (or a missing library).
# Within the layer, no two objects call each other, directly or through
# others (lib/circles.sh): a module's files are in layers too.
$(BUILD)/lib/$(1).layer: $(foreach l,$(USES_$(1)),$(call layer_lib,$(l))) \
		$(BUILD)/lib/layer-main.o lib/circles.sh
	$$(CC) $$(LDFLAGS) -o $$@.bin $(BUILD)/lib/layer-main.o \
		-Wl,--whole-archive $(call layer_lib,$(1)) -Wl,--no-whole-archive \
		$(foreach l,$(wordlist 2,9,$(USES_$(1))),$(call layer_lib,$(l))) \
		$$(SYSLIBS_$(1))
	@rm -f $$@.bin
	./lib/circles.sh $(call layer_lib,$(1))
	@touch $$@
endef
$(foreach l,$(LAYERS),$(eval $(call layer_rules,$(l))))

$(BUILD)/lib/layer-main.o: | $(BUILD)/lib
	printf 'int main(void) { return 0; }\n' | $(CC) -x c -c -o $@ -

layers: $(LAYERS:%=$(BUILD)/lib/%.layer)

FORCE:

$(BUILD)/pic/%.o: lib/client/%.c | $(BUILD)/pic
	$(CC) $(CPPFLAGS) -Ilib/client $(PIC_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/pic/base/%.o: lib/base/%.c | $(BUILD)/pic/base
	$(CC) $(CPPFLAGS) -Ilib/base $(PIC_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/pic/datapos.o: lib/client/datapos.c | $(BUILD)/pic
	$(CC) $(CPPFLAGS) -Ilib/client -Ilib/base $(PKG_CFLAGS) $(PIC_CFLAGS) \
		-MMD -MP -c -o $@ $<

$(DATALIB): $(DATALIB_OBJ) lib/client/datapos.map
	$(CC) $(PIC_LDFLAGS) -shared -Wl,-soname,libmuster-data.so.0 \
		-Wl,--version-script=lib/client/datapos.map -o $@ $(DATALIB_OBJ) \
		$(JSON_LIBS)
	ln -sf libmuster-data.so.0 $(BUILD)/lib/libmuster-data.so

$(SYNCLIB): $(SYNCLIB_OBJ) lib/client/syncpoint.map
	$(CC) $(PIC_LDFLAGS) -shared -Wl,-soname,libmuster-syncpoint.so.0 \
		-Wl,--version-script=lib/client/syncpoint.map -o $@ $(SYNCLIB_OBJ)
	ln -sf libmuster-syncpoint.so.0 $(BUILD)/lib/libmuster-syncpoint.so

$(BUILD)/cmd/%.o: cmd/%.c | $(BUILD)/cmd
	$(CC) $(CPPFLAGS) $(ALL_INC) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/unit/%.o: test/unit/%.c | $(BUILD)/unit
	$(CC) $(CPPFLAGS) $(ALL_INC) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/bench/%.o: bench/%.c | $(BUILD)/bench
	$(CC) $(CPPFLAGS) $(ALL_INC) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/test/%.o: test/%.c | $(BUILD)/test
	$(CC) $(CPPFLAGS) $(ALL_INC) $(PKG_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(SERVERS:%=$(BUILD)/bin/%): $(BUILD)/bin/%: $(BUILD)/cmd/%.o \
		$(SERVER_ARCHIVES) | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $< $(SERVER_ARCHIVES) $(HTTPD_LIBS) $(JSON_LIBS) \
		$(SYS_LIBS)

$(CLIENTS:%=$(BUILD)/bin/%): $(BUILD)/bin/%: $(BUILD)/cmd/%.o \
		$(CLIENT_ARCHIVES) | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $< $(CLIENT_ARCHIVES) $(JSON_LIBS) $(SYS_LIBS)

$(TEST_PROGS): $(BUILD)/bin/%: $(BUILD)/test/%.o $(CLIENT_ARCHIVES) | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $< $(CLIENT_ARCHIVES) $(JSON_LIBS) $(SYS_LIBS)

$(BUILD)/bin/unit: $(UNIT_OBJ) $(ALL_ARCHIVES) | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $(UNIT_OBJ) $(ALL_ARCHIVES) $(HTTPD_LIBS) \
		$(JSON_LIBS) $(SYS_LIBS)

# The load generator drives thousands of requests with libcurl's multi API.
$(BUILD)/bin/bench-%: $(BUILD)/bench/%.o $(ALL_ARCHIVES) | $(BUILD)/bin
	$(CC) $(LDFLAGS) -o $@ $< $(ALL_ARCHIVES) $(HTTPD_LIBS) $(JSON_LIBS) \
		$(SYS_LIBS) $(CURL_LIBS)

$(BUILD)/lib $(BUILD)/pic $(BUILD)/pic/base $(BUILD)/cmd $(BUILD)/unit \
		$(BUILD)/bench $(BUILD)/test $(BUILD)/bin $(BUILD)/fuzz:
	@mkdir -p $@

unit: deps $(BUILD)/bin/unit
	$(BUILD)/bin/unit

# The whole suite: C unit tests, then every bats file, as TAP; then a short
# run of every fuzz harness when clang can build them.
check: all $(BUILD)/bin/unit $(TEST_PROGS)
	@./test/deps.sh test
	@if ./fuzz/run.sh --can-build; then $(MAKE) --no-print-directory fuzz-build; \
	else echo "fuzz: skipped: clang with libFuzzer is missing" \
		"(apt-get install clang)"; fi
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin MUSTER_FUZZ=$(CURDIR)/$(FUZZ_BUILD)/fuzz \
		./test/run.sh

# libFuzzer harnesses (fuzz/fuzz_*.c), each linked with the whole library
# built by clang with AddressSanitizer and UBSan in a tree of its own.
# `make fuzz` runs each for FUZZ_TIME seconds; `make check` for a few.
FUZZ_TARGETS := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_BUILD   := build-fuzz
FUZZ_FLAGS   := -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_TIME    ?= 300

fuzz-build:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang \
		CFLAGS="-std=c11 -O1 -g -Wall $(FUZZ_FLAGS)" LDFLAGS= fuzz-bins

fuzz-bins: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)

$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz.h $(ALL_ARCHIVES) | $(BUILD)/fuzz
	$(CC) $(CPPFLAGS) $(ALL_INC) -Ifuzz $(PKG_CFLAGS) $(CFLAGS) \
		-fsanitize=fuzzer -o $@ $< $(ALL_ARCHIVES) $(HTTPD_LIBS) \
		$(JSON_LIBS) $(SYS_LIBS)

fuzz: fuzz-build
	./fuzz/run.sh $(FUZZ_BUILD)/fuzz $(FUZZ_TIME)

asan:
	$(MAKE) SANITIZER=address check

ubsan:
	$(MAKE) SANITIZER=undefined check

bench: all $(BENCH_PROGS:%=$(BUILD)/bin/bench-%)
	@./test/deps.sh bench
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin ./bench/run.sh

# The README's first command: a 4-task job survives a preemption.
demo: all
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin ./examples/demo.sh

# Opt-in: a real DDP job with PyTorch, when Debian's python3-torch is there.
example-ddp: all
	MUSTER_BIN=$(CURDIR)/$(BUILD)/bin PYTHON=$(PYTHON) ./examples/ddp/run.sh

lint:
	@./test/deps.sh lint
	mandoc -Tlint -W warning $(addprefix man/,$(MAN1) $(MAN8))
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

# The layout of every C file, from .clang-format.
format:
	clang-format -i $$(git ls-files '*.c' '*.h')

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCLUDEDIR)/muster $(DESTDIR)$(PYTHONDIR)
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(addprefix man/,$(MAN1)) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(addprefix man/,$(MAN8)) $(DESTDIR)$(MANDIR)/man8/
	install -m 755 $(SYNCLIB) $(DATALIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libmuster-syncpoint.so.0 $(DESTDIR)$(LIBDIR)/libmuster-syncpoint.so
	ln -sf libmuster-data.so.0 $(DESTDIR)$(LIBDIR)/libmuster-data.so
	install -m 644 lib/client/syncpoint.h lib/client/datapos.h \
		$(DESTDIR)$(INCLUDEDIR)/muster/
	sed 's|^LIBPATH = None|LIBPATH = "$(LIBDIR)/libmuster-syncpoint.so.0"|' \
		python/muster_syncpoint.py >$(DESTDIR)$(PYTHONDIR)/muster_syncpoint.py
	chmod 644 $(DESTDIR)$(PYTHONDIR)/muster_syncpoint.py
	install -m 644 python/muster_data.py python/muster_kv.py \
		python/muster_closures.py $(DESTDIR)$(PYTHONDIR)/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PROGS))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(MAN1))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(MAN8))
	rm -f $(DESTDIR)$(LIBDIR)/libmuster-syncpoint.so.0 \
		$(DESTDIR)$(LIBDIR)/libmuster-syncpoint.so \
		$(DESTDIR)$(INCLUDEDIR)/muster/syncpoint.h \
		$(DESTDIR)$(PYTHONDIR)/muster_syncpoint.py \
		$(DESTDIR)$(LIBDIR)/libmuster-data.so.0 \
		$(DESTDIR)$(LIBDIR)/libmuster-data.so \
		$(DESTDIR)$(INCLUDEDIR)/muster/datapos.h \
		$(DESTDIR)$(PYTHONDIR)/muster_data.py \
		$(DESTDIR)$(PYTHONDIR)/muster_kv.py \
		$(DESTDIR)$(PYTHONDIR)/muster_closures.py

clean:
	rm -rf build build-address build-undefined build-fuzz

-include $(wildcard $(BUILD)/*/*.d $(BUILD)/lib/*/*.d $(BUILD)/pic/*/*.d)
