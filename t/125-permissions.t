# Who the workers and the scheduler run as, and what happens when that user cannot read
# the model: one line naming the user, the path and the reason, in the error log and in
# the model's status, never a crash or a hang. A root master runs them as
# TEST_NGINX_WORKER_USER (scripts/run-tests.sh: the ngx-srt user, scripts/srt-user.sh),
# or as nobody here when that is unset, since root itself can read any file.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

run_tests();

__DATA__

=== TEST 1: a model the scheduler's user cannot read: the scheduler fails with the user, the path and the reason
--- init
package main;
my $dir = srt_dir('unreadable-model');
system("rm -rf '$dir/tiny' && cp -r '$ENV{TEST_NGINX_SRT_TINY}' '$dir/tiny'") == 0 or die "cannot copy the tiny model";
my $shard = "$dir/tiny/model-00002-of-00002.safetensors";
-f $shard or die "$shard: not in the tiny model";
chmod 0000, $shard or die "chmod $shard: $!";
# Debian's nobody has no group of its name: nogroup
my $user = $> == 0 ? ($ENV{TEST_NGINX_WORKER_USER} || 'nobody nogroup') : scalar getpwuid($>);
my $port = server_port() + 1;
my $ngx = private_nginx('unreadable', $port, "srt_model $dir/tiny name=tiny; srt_device cpu;", user => $user);
$ngx->start or die "nginx failed to start";
# the user cannot reach the shard (mode 0000), or, under a root master without
# TEST_NGINX_WORKER_USER, perhaps not the directory either: any file of the model will do
my ($name) = split ' ', $user;
my $line = qr/srt: scheduler for model "tiny" failed: \Q$dir\E\/tiny\/\S+: cannot open: Permission denied \(this process runs as user "\Q$name\E", uid \d+/;
Test::More::ok($ngx->wait_log($line, 30), "the error log names the user ($name), the path and the reason")
    or Test::More::diag($ngx->log);
my ($st, $body) = Test::Srt::http_request('GET', '/v1/health', undef, {}, $port);
Test::More::is($st, 503, "/health: 503 while the model cannot be loaded");
Test::More::like($body, qr/cannot open: Permission denied \(this process runs as user \\"\Q$name\E\\"/,
                 "/health: the same reason");
Test::More::unlike($ngx->log, qr/\[alert\].*(?:signal|core)|segfault/i, "no crash");
$ngx->stop;
chmod 0644, $shard;
--- config
location = /t { return 200 "ok\n"; }
--- request
GET /t
--- response_body
ok
