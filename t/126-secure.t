# conf/nginx-secure.conf itself, driven by the official openai client: API keys checked by
# nginx (map on Authorization: Bearer), nginx's own errors as OpenAI error JSON (error_page),
# Retry-After on 429 and 503. The file is used as written, but for its paths, its port, a
# small KV budget, a rate of 1 a minute with a burst of 1 and a 16k body limit, so that
# each limit is reached by a few requests.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

master_on();

run_tests();

__DATA__

=== TEST 1: every error body the example returns is an OpenAI error object; 429 and 503 say Retry-After
--- init
package main;
open my $fh, '<', "$FindBin::Bin/../conf/nginx-secure.conf" or die $!;
my $conf = do { local $/; <$fh> };
my %seen;
while ($conf =~ /location \@srt_(\d+) \{(.*?)\n        \}/sg) {
    my ($code, $body) = ($1, $2);
    $seen{$code} = 1;
    my ($st, $json) = $body =~ /return (\d+) '(.*)\\n';/;
    Test::More::is($st, $code, "\@srt_$code returns $code");
    my $e = eval { JSON::PP::decode_json($json) };
    Test::More::ok($e && $e->{error}{message} && $e->{error}{type} && exists $e->{error}{code},
                   "\@srt_$code: an OpenAI error object") or Test::More::diag($@ || $json);
    Test::More::is(scalar($body =~ /add_header Retry-After \d+ always;/), ($code == 429 || $code == 503) ? 1 : '',
                   "\@srt_$code: Retry-After only on 429 and 503");
    Test::More::like($conf, qr/error_page $code = \@srt_$code;/, "error_page $code leads there");
}
Test::More::is(join(',', sort keys %seen), '401,403,413,429,502,503,504', "every status nginx may produce");
--- config
location = /t { return 200 "ok\n"; }
--- request
GET /t
--- response_body
ok



=== TEST 2: the openai client against conf/nginx-secure.conf: good key, bad key, revoked key, 413, rate limit
--- timeout: 180
--- init
package main;
my $dir = srt_dir('secure');
system("rm -rf '$dir' && mkdir -p '$dir'") == 0 or die;
my $port = server_port() + 1;
open my $fh, '<', "$FindBin::Bin/../conf/nginx-secure.conf" or die $!;
my $conf = do { local $/; <$fh> };
my $u = $ENV{TEST_NGINX_WORKER_USER};
my $user = defined $u && length $u ? "user $u;" : $> == 0 ? 'user root;' : '';
my %sub = (
    'load_module build/nginx/ngx_http_srt_module.so;' => "load_module $ENV{TEST_NGINX_SRT_MODULE};\n$user",
    '../build/run/' => "$dir/", 'build/run/' => "$dir/",
    '127.0.0.1:8443' => "127.0.0.1:$port",
    '.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf' => $ENV{TEST_NGINX_SRT_MODEL},
    'srt_max_total_tokens 65536;' => 'srt_max_total_tokens 2048; srt_context_length 512; srt_threads 2;',
    'rate=5r/s' => 'rate=1r/m', 'burst=10' => 'burst=1',
    'client_max_body_size 1m;' => 'client_max_body_size 16k;',
);
for my $from (sort { length $b <=> length $a } keys %sub) {
    my $n = $conf =~ s/\Q$from\E/$sub{$from}/g;
    die "conf/nginx-secure.conf no longer has '$from'" unless $n;
}
open $fh, '>', "$dir/nginx.conf" or die $!; print $fh $conf; close $fh;
open $fh, '>', "$dir/api-keys.map" or die $!;
print $fh qq{"Bearer sk-test-0123456789abcdef" alice;\n"Bearer sk-test-revoked" -;\n};
close $fh;
system("cp '$FindBin::Bin/lib/tls/test.crt' '$dir/server.crt' && cp '$FindBin::Bin/lib/tls/test.key' '$dir/server.key'") == 0 or die;
my $bin = $ENV{TEST_NGINX_BINARY} || 'nginx';
system($bin, '-p', "$dir/", '-c', "$dir/nginx.conf") == 0 or die "nginx failed to start with the secure example";
my @out = `python3 $FindBin::Bin/lib/openai_secure.py https://localhost:$port $dir/server.crt sk-test-0123456789abcdef sk-test-revoked 2>&1`;
system($bin, '-p', "$dir/", '-c', "$dir/nginx.conf", '-s', 'stop');
Test::More::ok(tap_lines('openai', @out) >= 12, "the client ran every check") or Test::More::diag(join '', @out);
open $fh, '<', "$dir/error-secure.log";
my $log = do { local $/; <$fh> // '' };
Test::More::unlike($log, qr/\[(?:alert|emerg)\]/, "no alert in the secure server's log");
--- config
location = /t { return 200 "ok\n"; }
--- request
GET /t
--- response_body
ok
