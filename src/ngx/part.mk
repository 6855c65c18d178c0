# The nginx module, built out of tree against the system nginx (Debian: nginx-dev) with the
# package's own configure flags, so the .so is binary-compatible with /usr/sbin/nginx.
# Nothing is written into the nginx source directory: configure and make use --builddir.

NGX_SRC_DIR ?= /usr/share/nginx/src
NGX_BUILD   := $(BUILD)/nginx
NGX_MODULE  := $(NGX_BUILD)/ngx_http_srt_module.so
NGX_MODULE_SOURCES := config $(wildcard src/ngx/*.c src/ngx/*.h) src/ipc/channel.h

ifneq ($(wildcard $(NGX_SRC_DIR)/configure),)
EXTRA_ALL += $(NGX_MODULE)
endif

.PHONY: nginx-module
nginx-module: $(NGX_MODULE)

$(NGX_BUILD)/Makefile: config src/ngx/part.mk
	@mkdir -p $(NGX_BUILD)
	cd $(NGX_SRC_DIR) && SRT_LIBSRT=$(abspath $(BUILD))/libsrt.a bash -c \
	    '. ./conf_flags && ./configure "$${NGX_CONF_FLAGS[@]}" \
	    --with-cc-opt="-g -O2 -fPIC $(NGX_SAN_FLAGS)" --with-ld-opt="-fPIC $(NGX_SAN_FLAGS)" \
	    --add-dynamic-module=$(CURDIR) --builddir=$(abspath $(NGX_BUILD))' \
	    > $(abspath $(NGX_BUILD))/configure.log 2>&1 \
	    || { tail -30 $(abspath $(NGX_BUILD))/configure.log; exit 1; }

# nginx's Makefile does not know libsrt.a: relink whenever it or a module source changes.
$(NGX_MODULE): $(NGX_BUILD)/Makefile $(NGX_MODULE_SOURCES) $(BUILD)/libsrt.a
	rm -f $@
	$(MAKE) -f $(abspath $(NGX_BUILD))/Makefile -C $(NGX_SRC_DIR) modules

# make run: everything README's first command promises, then nginx in the foreground.
.PHONY: run
run: deps
	$(MAKE) all
	scripts/fetch-model.sh
	@mkdir -p $(BUILD)/run
	@echo 'serving SmolLM2-135M-Instruct on http://127.0.0.1:8080 (Ctrl-C stops it); try:'
	@echo "  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\":\"smollm2\",\"messages\":[{\"role\":\"user\",\"content\":\"What is nginx?\"}],\"max_tokens\":64}'"
	@# started as root, the workers and the scheduler run as an unprivileged user that can read
	@# the clone and the model (scripts/srt-user.sh creates it and says how), never as root
	@u=$$(scripts/srt-user.sh "$(CURDIR)") || exit 1; \
	 g='daemon off;'; [ "$$(id -u)" = 0 ] && g="$$g user $$u;"; \
	 echo "nginx workers and the scheduler run as $$u"; \
	 set -x; exec nginx -p "$(CURDIR)/" -c conf/nginx.conf -g "$$g"
