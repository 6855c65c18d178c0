# (included before src/ngx/part.mk: its variables are used in recipes only)
# Installing the module for the system nginx, the way Debian's libnginx-mod-* packages lay it
# out, and the Debian package itself.
#
#   make install [DESTDIR=...] [PREFIX=/usr]   the .so into nginx's modules directory, its
#        load_module line into $(PREFIX)/share/nginx/modules-available/mod-http-srt.conf, and
#        (CUDA builds) the CUDA plugin into $(PREFIX)/lib/nginx/srt/. Installing into the live
#        system (no DESTDIR) also enables it (/etc/nginx/modules-enabled/50-mod-http-srt.conf)
#        and refuses an nginx of another version than the one the module was built against.
#   make uninstall                             the reverse
#   make deb                                   build/deb/libnginx-mod-http-srt_*.deb (scripts/build-deb.sh)
#
# A CUDA build that is to be installed needs the plugin's final path compiled in:
#   make BUILD=build/pkg CUDA_PLUGIN_PATH=/usr/lib/nginx/srt/libsrt_cuda.so all install
# (a build whose plugin path is its own build tree installs the module without the plugin)

PREFIX           ?= /usr
NGX_MODULES_DIR  ?= $(PREFIX)/lib/nginx/modules
NGX_MODULES_CONF ?= $(PREFIX)/share/nginx/modules-available
SRT_LIB_DIR      ?= $(PREFIX)/lib/nginx/srt
NGX_ENABLED_DIR  ?= /etc/nginx/modules-enabled
NGX_BUILT_FOR     = $(shell awk '$$2 == "NGINX_VERSION" { gsub(/"/, "", $$3); print $$3 }' $(NGX_SRC_DIR)/src/core/nginx.h 2>/dev/null)

# Debian's nginx finds modules/ under its prefix (/usr/share/nginx/modules -> /usr/lib/nginx/modules)
ifeq ($(NGX_MODULES_DIR),/usr/lib/nginx/modules)
NGX_LOAD_PATH := modules/ngx_http_srt_module.so
else
NGX_LOAD_PATH := $(NGX_MODULES_DIR)/ngx_http_srt_module.so
endif

.PHONY: install uninstall deb
install: nginx-module
	@if [ -z "$(DESTDIR)" ] && command -v nginx >/dev/null; then \
	    v=$$(nginx -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p'); \
	    if [ "$$v" != "$(NGX_BUILT_FOR)" ]; then \
	        echo "make install: the module was built against nginx $(NGX_BUILT_FOR) ($(NGX_SRC_DIR)), but $$(command -v nginx) is $$v: nginx would refuse to load it; rebuild against this nginx's sources" >&2; \
	        exit 1; \
	    fi; \
	fi
	install -d $(DESTDIR)$(NGX_MODULES_DIR) $(DESTDIR)$(NGX_MODULES_CONF)
	install -m 0644 $(NGX_MODULE) $(DESTDIR)$(NGX_MODULES_DIR)/ngx_http_srt_module.so
	echo 'load_module $(NGX_LOAD_PATH);' > $(DESTDIR)$(NGX_MODULES_CONF)/mod-http-srt.conf
	chmod 0644 $(DESTDIR)$(NGX_MODULES_CONF)/mod-http-srt.conf
	@# the plugin only where the module's loader was built to look for it (CUDA_PLUGIN_PATH)
	@if [ -f $(BUILD)/lib/libsrt_cuda.so ] && [ "$(CUDA_PLUGIN_PATH)" = "$(SRT_LIB_DIR)/libsrt_cuda.so" ]; then \
	    echo "install -D -m 0644 $(BUILD)/lib/libsrt_cuda.so $(DESTDIR)$(SRT_LIB_DIR)/libsrt_cuda.so"; \
	    install -D -m 0644 $(BUILD)/lib/libsrt_cuda.so $(DESTDIR)$(SRT_LIB_DIR)/libsrt_cuda.so; \
	fi
	@if [ -z "$(DESTDIR)" ] && [ -d $(NGX_ENABLED_DIR) ]; then \
	    echo "ln -sf $(NGX_MODULES_CONF)/mod-http-srt.conf $(NGX_ENABLED_DIR)/50-mod-http-srt.conf"; \
	    ln -sf $(NGX_MODULES_CONF)/mod-http-srt.conf $(NGX_ENABLED_DIR)/50-mod-http-srt.conf; \
	fi

uninstall:
	rm -f $(DESTDIR)$(NGX_MODULES_DIR)/ngx_http_srt_module.so \
	      $(DESTDIR)$(NGX_MODULES_CONF)/mod-http-srt.conf $(DESTDIR)$(SRT_LIB_DIR)/libsrt_cuda.so
	-rmdir $(DESTDIR)$(SRT_LIB_DIR) 2>/dev/null
	@if [ -z "$(DESTDIR)" ]; then rm -f $(NGX_ENABLED_DIR)/50-mod-http-srt.conf; fi

deb:
	scripts/build-deb.sh
