# Offline command-line tools.
TOOLS += $(BUILD)/bin/srt-generate
