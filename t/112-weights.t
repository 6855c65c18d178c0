# srt_weights_mmap: by default the CPU scheduler copies the weights out of the model file's
# mapping into memory of its own (2 MB pages where the kernel gives them; decode streams every
# weight each step), and says so in its ready line with the size; `srt_weights_mmap on` reads
# them in place. Both answer with the same tokens.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');
srt_defaults(timeout => 60);

run_tests();

__DATA__

=== TEST 1: the default copies the weights (their size in the ready line)
--- config eval
Test::Srt::srt_location('/v1', srt_threads => 1)
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/scheduler ready: [^\n]*, weights copied \((?:[1-9]\d|\d{3,}) MB\), on cpu\n/]



=== TEST 2: srt_weights_mmap on reads them in place, same tokens
--- config eval
Test::Srt::srt_location('/v1', srt_threads => 1, srt_weights_mmap => 'on')
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/scheduler ready: [^\n]*, weights in place \(mmap\), on cpu\n/]
--- no_error_log
weights copied
