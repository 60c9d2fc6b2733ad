# cluster.tcl -- clusters of servers for the cluster tests: an etcd, N nodes
# of one kind, redis-cli --cluster to join them, and helpers to look at what
# they say.  Sourced by the test files that need it:
#
#   source [file join $::harness(testsdir) support cluster.tcl]
#   cluster_block mooncake {nodes 3 timeout 2000} {
#       test {create} { cluster_create }
#       test {a key} { R 0 set foo bar }     ;# node 0, or a MOVED error
#   }
#
# Two kinds of node run the same tests:
#   redis     Debian's redis-server in cluster mode (cluster-enabled yes,
#             cluster-config-file nodes-P.conf, cluster-node-timeout MS);
#             the reference the client-facing tests are checked against.
#   mooncake  the server under test (--server-binary, src/mooncake-server by
#             default) with --cluster-enabled yes --cluster-etcd-endpoints
#             http://127.0.0.1:E --cluster-name NAME --cluster-node-timeout
#             MS --segment-size 64mb, all nodes of a block sharing one etcd
#             started for that block.
#
# Nodes are servers of the harness (support/server.tcl): each has its own
# tests/tmp/server.<pid>.<n>/ with its config, log and pid file, so the
# runner kills what a dead worker leaves behind, a node that dies without
# being told to fails the running test, and sanitizer reports in a node's
# log count as failures when the block ends.  Nodes are numbered from 0 in
# the order they were started; that number is what every proc here takes.
# Every node gets a port P with P+10000 free too (Redis's cluster bus).
#
# A block that cannot run -- tags excluded, etcd or redis-server missing, a
# mooncake-server that refuses --cluster-enabled -- runs its body with every
# test reported as skipped with the reason, as start_server does; the procs
# here then return "" without doing anything.
#
# Procs:
#   cluster_block kind options body   options: nodes N (3), timeout MS (2000),
#                                     tags {..}, args {extra server args};
#                                     its tests get the tags cluster and
#                                     cluster-KIND (and mooncake for ours)
#   cluster_start_nodes n             n more nodes; returns their indexes
#   cluster_kill_node i               kill -9 (the others should notice)
#   cluster_stop_node i               SIGTERM and wait
#   cluster_restart_node i            same binary, dir, port and arguments
#   cluster_stop_all                  every node and the etcd
#   cluster_node_count / cluster_indexes / cluster_alive i
#   cluster_port i / cluster_addr i / cluster_pid i / cluster_dir i / cluster_log i
#   R i cmd arg...                    a command to node i (one client each)
#   cluster_client i                  a new client of node i (close it)
#   cluster_reconnect i               a fresh default client for node i
#   cluster_cli arg...                redis-cli, output without colours;
#                                     fails the test on a non-zero exit
#   cluster_cli_rc arg...             the same, returns {exitcode output}
#   cluster_cut_output text           first and last lines of a long output
#   cluster_create ?indexes? ?extra?  redis-cli --cluster create ... --cluster-yes,
#                                     then cluster_wait_ok
#   cluster_wait_ok ?indexes? ?ms?    --cluster check passes and every node
#                                     says cluster_state:ok
#   cluster_settle ?indexes?          --cluster fix first if check is not clean
#                                     (after an earlier test failed half-way)
#   cluster_check i                   {exitcode output} of --cluster check
#   cluster_check_clean output        1 if that output has no ERR/WARNING
#                                     and says all slots agree and are covered
#   assert_contains text sub          a literal substring (redis-cli's "[OK]")
#   cluster_info i / cluster_info_field i field
#   cluster_nodes i                   CLUSTER NODES parsed: a list of dicts
#                                     (id host port cport flags master ping
#                                     pong epoch link slots line); the
#                                     parser alone: cluster_parse_nodes text
#   cluster_ranges_of slotfields      {{lo hi} ...} of a line's slot fields
#   cluster_myself i / cluster_node_id i
#   cluster_slot_ranges i             node i's own slots: {{lo hi} ...}
#   cluster_slot_count i
#   cluster_slot_owner slot ?via?     index of the owner as node via sees it
#   cluster_index_of_id id / cluster_index_of_port port
#   cluster_key_in_slot slot ?prefix? a key ({tag}-style) hashing to slot
#   cluster_key_for_node i ?prefix?   a key that node i serves
#   crc16 bytes / key_hash_slot key   CRC16/XMODEM and Redis's keyslot
#   etcd_start / etcd_stop / etcd_restart / etcd_wipe / etcd_endpoint / etcd_healthy
#   cluster_free_ports n              a base port P with P..P+n-1 and their
#                                     +10000 free (for utils/create-cluster)
#   cluster_track_pid pid / cluster_untrack_pid pid
#                                     let the runner kill a process this
#                                     worker started some other way if the
#                                     worker dies (a pid file it looks at)

package require http

set ::cluster(etcd_bin) [expr {[file executable /usr/bin/etcd] ? "/usr/bin/etcd" : [find_program etcd]}]
set ::cluster(redis_bin) [find_program redis-server]
set ::cluster(cli) [find_program redis-cli]
set ::cluster(python) [find_program /usr/bin/python3]
set ::cluster(timeout_cmd) [expr {[find_program timeout] ne "" ? [list timeout 120] : {}}]
set ::cluster(nodes) {}
set ::cluster(kind) {}
set ::cluster(node_timeout) 2000
set ::cluster(name) {}
set ::cluster(extra_args) {}
set ::cluster(blocks) 0
array set ::etcd {pid 0 dir {} client_port 0 peer_port 0}

# ------------------------------------------------------------- CRC16

# CRC16/XMODEM (polynomial 0x1021, initial value 0), the hash of Redis
# Cluster's key slots.  "123456789" -> 0x31C3.
proc __crc16_init__ {} {
    set ::__crc16tab {}
    for {set i 0} {$i < 256} {incr i} {
        set crc [expr {$i << 8}]
        for {set b 0} {$b < 8} {incr b} {
            if {$crc & 0x8000} {
                set crc [expr {(($crc << 1) ^ 0x1021) & 0xffff}]
            } else {
                set crc [expr {($crc << 1) & 0xffff}]
            }
        }
        lappend ::__crc16tab $crc
    }
}
__crc16_init__

# crc16 bytes: keys are byte strings (every character below 256), as the
# test client sends them.
proc crc16 {bytes} {
    binary scan $bytes cu* vals
    set crc 0
    foreach b $vals {
        set crc [expr {(($crc << 8) & 0xffff) ^ [lindex $::__crc16tab [expr {(($crc >> 8) ^ $b) & 0xff}]]}]
    }
    return $crc
}

# key_hash_slot key: the slot of a key.  Only the part between the first
# "{" and the first "}" after it is hashed, when that part is not empty.
proc key_hash_slot {key} {
    set s [string first "\{" $key]
    if {$s >= 0} {
        set e [string first "\}" $key [expr {$s + 1}]]
        if {$e > $s + 1} {
            set key [string range $key [expr {$s + 1}] [expr {$e - 1}]]
        }
    }
    return [expr {[crc16 $key] & 16383}]
}

# cluster_key_in_slot slot ?prefix?: "prefix{tN}" for the first N whose tag
# hashes to slot.  Every tag tried on the way is remembered.
proc cluster_key_in_slot {slot {prefix k}} {
    if {![info exists ::__slot_tag($slot)]} {
        if {![info exists ::__slot_tag_next]} { set ::__slot_tag_next 0 }
        while {![info exists ::__slot_tag($slot)]} {
            set tag "t$::__slot_tag_next"
            incr ::__slot_tag_next
            set s [expr {[crc16 $tag] & 16383}]
            if {![info exists ::__slot_tag($s)]} { set ::__slot_tag($s) $tag }
        }
    }
    return "$prefix\{$::__slot_tag($slot)\}"
}

# --------------------------------------------------------------- ports

# A port P on 127.0.0.1 with P+10000 free as well (a Redis node's bus).
proc __cluster_port__ {} {
    for {set i 0} {$i < 200} {incr i} {
        set p [find_available_port]
        if {$p + 10000 <= 65535 && [__port_free__ [expr {$p + 10000}]]} { return $p }
    }
    error "no free port P with P+10000 free"
}

# cluster_free_ports n: a base port P such that P..P+n-1 and each +10000 are
# free now (for scripts that number their nodes from a base port).
proc cluster_free_ports {n} {
    for {set try 0} {$try < 200} {incr try} {
        set base [__cluster_port__]
        set ok 1
        for {set i 1} {$i < $n} {incr i} {
            set p [expr {$base + $i}]
            if {![__port_free__ $p] || ![__port_free__ [expr {$p + 10000}]]} { set ok 0; break }
        }
        if {$ok} {
            # find_available_port hands ports out in order: skip these.
            if {$::next_port <= $base + $n} { set ::next_port [expr {$base + $n}] }
            return $base
        }
    }
    error "no $n consecutive free ports found"
}

# ---------------------------------------------------------------- etcd

proc etcd_endpoint {} {
    return "http://127.0.0.1:$::etcd(client_port)"
}

# Is the etcd up and with a leader (GET /health says {"health":"true"})?
proc etcd_healthy {} {
    if {!$::etcd(client_port)} { return 0 }
    if {[catch {http::geturl "[etcd_endpoint]/health" -timeout 1000} tok]} { return 0 }
    set ok [expr {[http::status $tok] eq "ok" && [string match {*"health":"true"*} [http::data $tok]]}]
    http::cleanup $tok
    return $ok
}

proc __etcd_spawn__ {} {
    set d $::etcd(dir)
    set name mctest
    set cmd [list $::cluster(etcd_bin) --name $name --data-dir [file join $d data] \
        --listen-client-urls [etcd_endpoint] --advertise-client-urls [etcd_endpoint] \
        --listen-peer-urls http://127.0.0.1:$::etcd(peer_port) \
        --initial-advertise-peer-urls http://127.0.0.1:$::etcd(peer_port) \
        --initial-cluster $name=http://127.0.0.1:$::etcd(peer_port) \
        --initial-cluster-state new --logger zap --log-outputs stderr]
    verbose_puts "starting etcd: $cmd"
    set log [file join $d stderr]
    set off [__file_size__ $log]
    set ::etcd(pid) [exec {*}$cmd >> [file join $d stdout] 2>> $log &]
    set f [open [file join $d pid] w]
    puts $f $::etcd(pid)
    close $f
    set deadline [expr {[clock milliseconds] + 15000}]
    while {[clock milliseconds] < $deadline} {
        if {[etcd_healthy]} { return "" }
        if {![process_is_alive $::etcd(pid)]} {
            catch {exec true}
            set ::etcd(pid) 0
            return "etcd exited during startup: [string range [__read_from__ $log $off] end-600 end]"
        }
        after 50
    }
    __kill_pid__ $::etcd(pid)
    set ::etcd(pid) 0
    return "etcd not healthy after 15 s"
}

# etcd_start: a fresh single-member etcd on free client and peer ports, its
# data under its own tests/tmp/server.<pid>.<n>/ (pid file there too).
# Skips (the test, or the file when called outside a test) if etcd is not
# installed.
proc etcd_start {} {
    if {$::skip_reason ne ""} return
    if {$::cluster(etcd_bin) eq ""} {
        skip "etcd is not installed (Debian package etcd-server)"
    }
    if {$::etcd(pid) && [process_is_alive $::etcd(pid)]} { error "etcd_start: an etcd is already running" }
    set id [incr ::srvcount]
    set ::etcd(dir) [file join $::harness(tmpdir) "server.[pid].$id"]
    file mkdir $::etcd(dir)
    for {set attempt 0} {$attempt < 3} {incr attempt} {
        set ::etcd(client_port) [find_available_port]
        set ::etcd(peer_port) [find_available_port]
        set err [__etcd_spawn__]
        if {$err eq ""} break
        if {![string match "*address already in use*" $err]} break
        file delete -force [file join $::etcd(dir) data]
    }
    if {$err ne ""} { error "etcd_start: $err" }
    verbose_puts "etcd pid $::etcd(pid) ready on [etcd_endpoint] ($::etcd(dir))"
}

# etcd_stop: SIGTERM and wait (the data stays for etcd_restart).
proc etcd_stop {} {
    if {$::skip_reason ne ""} return
    if {$::etcd(pid) && [process_is_alive $::etcd(pid)]} {
        __kill_pid__ $::etcd(pid)
    }
    set ::etcd(pid) 0
}

# etcd_restart: stop it if it runs, start it again on the same ports with
# the same data.
proc etcd_restart {} {
    if {$::skip_reason ne ""} return
    etcd_stop
    set err [__etcd_spawn__]
    if {$err ne ""} { error "etcd_restart: $err" }
}

# etcd_wipe: stop it, drop its data, start a fresh one on the same ports
# (etcd recreated, or restored from an old backup: its revisions start
# again from 1).
proc etcd_wipe {} {
    if {$::skip_reason ne ""} return
    etcd_stop
    file delete -force [file join $::etcd(dir) data]
    set err [__etcd_spawn__]
    if {$err ne ""} { error "etcd_wipe: $err" }
}

# Remove the etcd's directory, unless a test failed in the block.
proc __etcd_cleanup__ {failed_before} {
    etcd_stop
    if {$::etcd(dir) ne "" && $::num_failed == $failed_before && !$::harness(dontclean)} {
        catch {file delete -force $::etcd(dir)}
    }
    array set ::etcd {pid 0 dir {} client_port 0 peer_port 0}
}

# --------------------------------------------------------------- nodes

proc __cluster_id__ {i} {
    set id [lindex $::cluster(nodes) $i]
    if {$id eq "" || ![string is integer -strict $i]} { error "no cluster node $i" }
    return $id
}

proc cluster_node_count {} { llength $::cluster(nodes) }

proc cluster_indexes {} {
    set out {}
    for {set i 0} {$i < [llength $::cluster(nodes)]} {incr i} { lappend out $i }
    return $out
}

proc cluster_port {i} {
    if {$::skip_reason ne ""} { return {} }
    return $::srvinfo([__cluster_id__ $i],port)
}
proc cluster_addr {i} {
    if {$::skip_reason ne ""} { return {} }
    return "127.0.0.1:[cluster_port $i]"
}
proc cluster_pid {i} {
    if {$::skip_reason ne ""} { return {} }
    return $::srvinfo([__cluster_id__ $i],pid)
}
proc cluster_dir {i} {
    if {$::skip_reason ne ""} { return {} }
    return $::srvinfo([__cluster_id__ $i],dir)
}
proc cluster_log {i} {
    if {$::skip_reason ne ""} { return {} }
    return $::srvinfo([__cluster_id__ $i],stdout)
}
proc cluster_alive {i} {
    if {$::skip_reason ne ""} { return 0 }
    set id [__cluster_id__ $i]
    expr {$::srvinfo($id,pid) && [process_is_alive $::srvinfo($id,pid)]}
}

# The directives of a node of the block's kind listening on port.
proc __cluster_node_config__ {id port} {
    set dir $::srvinfo($id,dir)
    switch -- $::cluster(kind) {
        redis {
            set ::srvinfo($id,config_lines) [list {save ""} {appendonly no} \
                "cluster-enabled yes" "cluster-config-file nodes-$port.conf" \
                "cluster-node-timeout $::cluster(node_timeout)"]
            set ::srvinfo($id,args) $::cluster(extra_args)
        }
        mooncake {
            set ::srvinfo($id,config_lines) {}
            set ::srvinfo($id,args) [list --cluster-enabled yes \
                --cluster-etcd-endpoints [etcd_endpoint] \
                --cluster-name $::cluster(name) \
                --cluster-node-timeout $::cluster(node_timeout) \
                --segment-size 64mb {*}$::cluster(extra_args)]
        }
        default { error "unknown cluster node kind '$::cluster(kind)'" }
    }
}

# Start one node; returns its index, or raises an error whose message holds
# the log, with errorcode {CLUSTER START}.
proc __cluster_spawn_node__ {} {
    set id [incr ::srvcount]
    set dir [file join $::harness(tmpdir) "server.[pid].$id"]
    file mkdir $dir
    set bin [expr {$::cluster(kind) eq "redis" ? $::cluster(redis_bin) : $::harness(binary)}]
    array set ::srvinfo [list \
        $id,host 127.0.0.1 \
        $id,dir $dir \
        $id,unixsocket [file join $dir sock] \
        $id,stdout [file join $dir stdout] \
        $id,stderr [file join $dir stderr] \
        $id,config_file [file join $dir server.conf] \
        $id,binary $bin \
        $id,overrides {} \
        $id,config_lines {} \
        $id,base_config {} \
        $id,args {} \
        $id,clients {} \
        $id,client {} \
        $id,pid 0 \
        $id,dead_ok 1 \
        $id,died_reported 0]
    for {set attempt 0} {$attempt < 3} {incr attempt} {
        set port [__cluster_port__]
        set ::srvinfo($id,port) $port
        __cluster_node_config__ $id $port
        __write_config__ $id
        set err [__spawn_server__ $id]
        if {$err eq ""} break
        set log [__log_tail__ $::srvinfo($id,stdout)]
        if {![regexp -nocase {address already in use|failed listening|could not create server tcp} $log]} break
    }
    if {$err ne ""} {
        set detail "$err\ncommand: $bin $::srvinfo($id,config_file) $::srvinfo($id,args)\nlast log lines:\n[__log_tail__ $::srvinfo($id,stdout)]"
        set st [__log_tail__ $::srvinfo($id,stderr) 15]
        if {[string trim $st] ne "" && ![string match "(no *" $st]} { append detail "\nstderr:\n$st" }
        # Kept for the block's cleanup (its logs are what tell why).
        lappend ::cluster(failed_ids) $id
        error $detail {} {CLUSTER START}
    }
    lappend ::cluster(nodes) $id
    lappend ::srvstack $id
    set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
    verbose_puts "$::cluster(kind) node [expr {[llength $::cluster(nodes)] - 1}]: pid $::srvinfo($id,pid) port $port ($dir)"
    return [expr {[llength $::cluster(nodes)] - 1}]
}

# cluster_start_nodes n: n more nodes of the block's kind; their indexes.
proc cluster_start_nodes {n} {
    if {$::skip_reason ne ""} { return {} }
    set out {}
    for {set k 0} {$k < $n} {incr k} { lappend out [__cluster_spawn_node__] }
    return $out
}

# cluster_kill_node i: SIGKILL, as a crash; nothing is flushed or said.
proc cluster_kill_node {i} {
    if {$::skip_reason ne ""} return
    set id [__cluster_id__ $i]
    __close_clients__ $id
    set ::srvinfo($id,dead_ok) 1
    set pid $::srvinfo($id,pid)
    catch {exec kill -KILL $pid}
    set deadline [expr {[clock milliseconds] + 5000}]
    while {[process_is_alive $pid] && [clock milliseconds] < $deadline} { after 10 }
    catch {exec true}
}

# cluster_stop_node i: SIGTERM and wait, as an orderly shutdown.
proc cluster_stop_node {i} {
    if {$::skip_reason ne ""} return
    set id [__cluster_id__ $i]
    __close_clients__ $id
    set ::srvinfo($id,dead_ok) 1
    if {[process_is_alive $::srvinfo($id,pid)]} {
        if {![__kill_pid__ $::srvinfo($id,pid)]} {
            fail "cluster node $i (pid $::srvinfo($id,pid)) did not exit within 10 s of SIGTERM"
        }
    }
}

# cluster_restart_node i: start the same binary with the same config file,
# arguments, directory and port (stopping it first if it still runs).
proc cluster_restart_node {i} {
    if {$::skip_reason ne ""} return
    set id [__cluster_id__ $i]
    if {[process_is_alive $::srvinfo($id,pid)]} { cluster_stop_node $i }
    __close_clients__ $id
    set err [__spawn_server__ $id]
    if {$err ne ""} {
        fail "restarting cluster node $i: $err\n[__log_tail__ $::srvinfo($id,stdout)]"
    }
    set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
}

# cluster_stop_all: every node (reporting deaths and sanitizer logs as
# start_server's end does) and the etcd.
proc cluster_stop_all {{failed_before {}}} {
    if {$failed_before eq ""} { set failed_before $::num_failed }
    foreach id [concat $::cluster(nodes) $::cluster(failed_ids)] {
        __stop_server__ $id $failed_before
        set k [lsearch -exact $::srvstack $id]
        if {$k >= 0} { set ::srvstack [lreplace $::srvstack $k $k] }
    }
    set ::cluster(nodes) {}
    set ::cluster(failed_ids) {}
    __etcd_cleanup__ $failed_before
}
set ::cluster(failed_ids) {}

# R i cmd arg...: a command to node i through its default client.
proc R {i args} {
    if {$::skip_reason ne ""} { return {} }
    set id [__cluster_id__ $i]
    set c $::srvinfo($id,client)
    if {$c eq "" || [info commands $c] eq ""} {
        set c [__srv_new_client__ $id 0 0]
        set ::srvinfo($id,client) $c
    }
    $c {*}$args
}

# cluster_client i ?defer?: a new client of node i; the caller closes it.
proc cluster_client {i {defer 0}} {
    if {$::skip_reason ne ""} { return __skipped_client__ }
    __srv_new_client__ [__cluster_id__ $i] $defer 0
}

# cluster_reconnect i: a fresh default client for node i.
proc cluster_reconnect {i} {
    if {$::skip_reason ne ""} return
    set id [__cluster_id__ $i]
    catch {$::srvinfo($id,client) close}
    set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
}

# ------------------------------------------------------------ redis-cli

proc __strip_ansi__ {s} {
    regsub -all {\x1b\[[0-9;]*m} $s {} s
    return $s
}

# cluster_cli_rc arg...: run redis-cli (TERM=dumb: no colours, stdin from
# /dev/null: no prompts); returns {exitcode output}.
proc cluster_cli_rc {args} {
    if {$::skip_reason ne ""} { return {0 {}} }
    if {$::cluster(cli) eq ""} { skip "redis-cli is not installed (Debian package redis-tools)" }
    set cmd [list {*}$::cluster(timeout_cmd) env TERM=dumb $::cluster(cli) {*}$args]
    verbose_puts "running: redis-cli $args"
    set rc [catch {exec {*}$cmd < /dev/null 2>@1} out opts]
    set code 0
    if {$rc} {
        set ec [dict get $opts -errorcode]
        if {[lindex $ec 0] eq "CHILDSTATUS"} {
            set code [lindex $ec 2]
        } else {
            set code 1
            append out "\n($ec)"
        }
    }
    return [list $code [__strip_ansi__ $out]]
}

# A long tool output cut to its first and last lines (reshard plans run to
# thousands of lines; the error is at the end).
proc cluster_cut_output {out {head 15} {tail 30}} {
    set lines [split $out "\n"]
    if {[llength $lines] <= $head + $tail + 1} { return $out }
    set n [expr {[llength $lines] - $head - $tail}]
    join [concat [lrange $lines 0 [expr {$head - 1}]] [list "    ... ($n lines left out) ..."] \
              [lrange $lines end-[expr {$tail - 1}] end]] "\n"
}

# cluster_cli arg...: the same, failing the test on a non-zero exit.
proc cluster_cli {args} {
    if {$::skip_reason ne ""} { return {} }
    lassign [cluster_cli_rc {*}$args] code out
    if {$code != 0} {
        fail "redis-cli $args exited with $code:\n[cluster_cut_output $out]"
    }
    return $out
}

# cluster_check i: {exitcode output} of redis-cli --cluster check via node i.
proc cluster_check {i} {
    if {$::skip_reason ne ""} { return {0 {}} }
    cluster_cli_rc --cluster check [cluster_addr $i]
}

# Does a --cluster check output say everything is fine?
proc cluster_check_clean {out} {
    expr {[string first {[OK] All nodes agree about slots configuration.} $out] >= 0 &&
          [string first {[OK] All 16384 slots covered.} $out] >= 0 &&
          [string first {[ERR]} $out] < 0 && [string first {[WARNING]} $out] < 0}
}

# assert_contains text sub ?detail?: text holds sub, literally (no glob:
# redis-cli's "[OK]" and "[WARNING]" are not character classes here).
proc assert_contains {text sub {detail {}}} {
    if {[string first $sub $text] < 0} {
        if {[string length $text] > 4000} { set text "...[string range $text end-4000 end]" }
        set m "Expected to find '$sub'"
        if {$detail ne ""} { append m " ($detail)" }
        fail "$m in:\n$text"
    }
}

# cluster_create ?indexes? ?extra args?: redis-cli --cluster create of these
# nodes (all by default), then cluster_wait_ok.  Returns redis-cli's output.
proc cluster_create {{indexes {}} {extra {}}} {
    if {$::skip_reason ne ""} { return {} }
    if {![llength $indexes]} { set indexes [cluster_indexes] }
    set addrs {}
    foreach i $indexes { lappend addrs [cluster_addr $i] }
    set out [cluster_cli --cluster create {*}$addrs {*}$extra --cluster-yes]
    cluster_wait_ok $indexes
    return $out
}

# cluster_wait_ok ?indexes? ?timeout_ms?: wait until redis-cli --cluster
# check through each of these nodes (by default all that are alive) is
# clean and each says cluster_state:ok; fails with the last output if not.
proc cluster_wait_ok {{indexes {}} {timeout_ms 30000}} {
    if {$::skip_reason ne ""} return
    if {![llength $indexes]} {
        foreach i [cluster_indexes] { if {[cluster_alive $i]} { lappend indexes $i } }
    }
    set deadline [expr {[clock milliseconds] + $timeout_ms}]
    while 1 {
        set why {}
        foreach i $indexes {
            if {[catch {cluster_info_field $i cluster_state} st]} {
                set why "node $i: CLUSTER INFO failed: $st"
                cluster_reconnect $i
                break
            }
            if {$st ne "ok"} { set why "node $i says cluster_state:$st"; break }
        }
        if {$why eq ""} {
            foreach i $indexes {
                lassign [cluster_check $i] code out
                if {$code != 0 || ![cluster_check_clean $out]} {
                    set why "redis-cli --cluster check [cluster_addr $i] (exit $code):\n$out"
                    break
                }
            }
        }
        if {$why eq ""} return
        if {[clock milliseconds] > $deadline} {
            fail "cluster not ok after [expr {$timeout_ms / 1000.0}] s: [cluster_cut_output $why]"
        }
        after 200
    }
}

# cluster_settle ?indexes?: for the start of a test that needs a sound
# cluster after an earlier test may have failed half-way (an open slot left
# by a failed reshard): if --cluster check is not clean, run --cluster fix
# once, then cluster_wait_ok.  The earlier failure has been reported; this
# only keeps it from failing every test after it.
proc cluster_settle {{indexes {}}} {
    if {$::skip_reason ne ""} return
    if {![llength $indexes]} {
        foreach i [cluster_indexes] { if {[cluster_alive $i]} { lappend indexes $i } }
    }
    set i [lindex $indexes 0]
    lassign [cluster_check $i] code out
    if {$code != 0 || ![cluster_check_clean $out]} {
        puts "    (cluster not sound at the start of this test: running redis-cli --cluster fix)"
        cluster_cli_rc --cluster fix [cluster_addr $i] --cluster-yes
    }
    cluster_wait_ok $indexes
}

# ---------------------------------------------------------- cluster facts

# cluster_info i: CLUSTER INFO as a dict.
proc cluster_info {i} {
    if {$::skip_reason ne ""} { return {} }
    set d {}
    foreach line [split [R $i cluster info] "\n"] {
        set line [string trimright $line "\r"]
        if {[regexp {^([a-z_0-9]+):(.*)$} $line -> k v]} { dict set d $k $v }
    }
    return $d
}

proc cluster_info_field {i field} {
    if {$::skip_reason ne ""} { return {} }
    set d [cluster_info $i]
    if {![dict exists $d $field]} { return {} }
    dict get $d $field
}

# cluster_parse_nodes text: CLUSTER NODES lines as dicts.  Fields: id, host,
# port, cport, hostname ("" if none), flags (a list), master, ping, pong,
# epoch, link, slots (the raw slot fields, open-slot markers included),
# line.  A line that does not have the 8 fixed fields raises an error.
proc cluster_parse_nodes {text} {
    set out {}
    foreach line [split $text "\n"] {
        set line [string trimright $line "\r"]
        if {$line eq ""} continue
        set f [split $line " "]
        if {[llength $f] < 8} { error "CLUSTER NODES line with [llength $f] fields: '$line'" }
        lassign $f id addr flags master ping pong epoch link
        set hostname {}
        if {![regexp {^(.*):(\d+)@(\d+)(?:,(.*))?$} $addr -> host port cport hostname]} {
            set host {}; set port {}; set cport {}
        }
        lappend out [dict create id $id host $host port $port cport $cport \
            hostname $hostname addr $addr flags [split $flags ,] master $master \
            ping $ping pong $pong epoch $epoch link $link \
            slots [lrange $f 8 end] line $line]
    }
    return $out
}

proc cluster_nodes {i} {
    if {$::skip_reason ne ""} { return {} }
    cluster_parse_nodes [R $i cluster nodes]
}

# The "myself" entry of node i's CLUSTER NODES.
proc cluster_myself {i} {
    if {$::skip_reason ne ""} { return {} }
    foreach n [cluster_nodes $i] {
        if {"myself" in [dict get $n flags]} { return $n }
    }
    fail "node $i: no 'myself' line in CLUSTER NODES"
}

proc cluster_node_id {i} {
    if {$::skip_reason ne ""} { return {} }
    dict get [cluster_myself $i] id
}

# The {lo hi} ranges of a CLUSTER NODES slots field list (open-slot markers
# like [5->-id] left out).
proc cluster_ranges_of {slotfields} {
    set out {}
    foreach s $slotfields {
        if {[string index $s 0] eq "\["} continue
        if {[regexp {^(\d+)-(\d+)$} $s -> lo hi]} {
            lappend out [list $lo $hi]
        } elseif {[string is integer -strict $s]} {
            lappend out [list $s $s]
        } else {
            error "bad slot field '$s'"
        }
    }
    return $out
}

proc cluster_slot_ranges {i} {
    if {$::skip_reason ne ""} { return {} }
    cluster_ranges_of [dict get [cluster_myself $i] slots]
}

proc __ranges_count__ {ranges} {
    set n 0
    foreach r $ranges { incr n [expr {[lindex $r 1] - [lindex $r 0] + 1}] }
    return $n
}

proc cluster_slot_count {i} {
    if {$::skip_reason ne ""} { return 0 }
    __ranges_count__ [cluster_slot_ranges $i]
}

proc cluster_index_of_port {port} {
    foreach i [cluster_indexes] {
        if {[cluster_port $i] == $port} { return $i }
    }
    return {}
}

proc cluster_index_of_id {nodeid} {
    if {$::skip_reason ne ""} { return {} }
    foreach i [cluster_indexes] {
        if {[cluster_alive $i] && [cluster_node_id $i] eq $nodeid} { return $i }
    }
    return {}
}

# cluster_slot_owner slot ?via?: the index of the node serving slot, as
# node via's CLUSTER NODES says ("" if nobody).
proc cluster_slot_owner {slot {via 0}} {
    if {$::skip_reason ne ""} { return {} }
    foreach n [cluster_nodes $via] {
        foreach r [cluster_ranges_of [dict get $n slots]] {
            if {$slot >= [lindex $r 0] && $slot <= [lindex $r 1]} {
                return [cluster_index_of_port [dict get $n port]]
            }
        }
    }
    return {}
}

# cluster_key_for_node i ?prefix?: a key in the first slot node i serves.
proc cluster_key_for_node {i {prefix k}} {
    if {$::skip_reason ne ""} { return {} }
    set r [lindex [cluster_slot_ranges $i] 0]
    if {$r eq ""} { fail "node $i serves no slot" }
    cluster_key_in_slot [lindex $r 0] $prefix
}

# cluster_track_pid pid: a tests/tmp/server.<pid>.<n>/pid file for a process
# started outside these procs (a script's nodes), so that the runner kills
# it if this worker dies first.  cluster_untrack_pid removes it.
proc cluster_track_pid {p} {
    set d [file join $::harness(tmpdir) "server.[pid].[incr ::srvcount]"]
    file mkdir $d
    set f [open [file join $d pid] w]
    puts $f $p
    close $f
    set ::cluster(tracked,$p) $d
}

proc cluster_untrack_pid {p} {
    if {[info exists ::cluster(tracked,$p)]} {
        catch {file delete -force $::cluster(tracked,$p)}
        unset ::cluster(tracked,$p)
    }
}

# ---------------------------------------------------------------- block

# Is the node kind usable here?  "" or why not.
proc __cluster_kind_missing__ {kind} {
    switch -- $kind {
        redis {
            if {$::cluster(redis_bin) eq ""} { return "redis-server is not installed (Debian package redis-server)" }
        }
        mooncake {
            if {$::harness(redis_mode)} { return "the server under test is redis-server; the redis kind covers it" }
            if {![file executable $::harness(binary)]} { return "no server binary $::harness(binary) (run make)" }
            if {$::cluster(etcd_bin) eq ""} { return "etcd is not installed (Debian package etcd-server)" }
        }
        default { error "cluster_block: unknown kind '$kind'" }
    }
    if {$::cluster(cli) eq ""} { return "redis-cli is not installed (Debian package redis-tools)" }
    return {}
}

# A mooncake node that exits at start-up because its config parser does not
# know a cluster directive: cluster mode is not built in yet.
proc __cluster_unsupported__ {detail} {
    if {[regexp {>>> '(cluster-[a-z-]+)[^\n]*\n([^\n]*)} $detail -> directive msg]} {
        return "$::harness(binary) refuses '$directive' ([string trim $msg]): cluster mode not built yet"
    }
    if {[regexp -nocase {cluster[^\n]*(not supported|unsupported|not built|not compiled)} $detail line]} {
        return "$::harness(binary): $line"
    }
    return {}
}

# cluster_block kind options body: run body with an etcd (kind mooncake)
# and options' nodes started (not yet joined: fresh nodes know only
# themselves); everything is stopped when the body ends, error or not.
# Options: nodes N (default 3), timeout MS (cluster-node-timeout, default
# 2000), tags {...} (cluster and cluster-KIND are added, and mooncake
# blocks get the tag mooncake), args {...} (more server arguments).  Use
# the procs above inside the block: they work on its nodes.
proc cluster_block {kind options code} {
    set nodes 3
    set timeout 2000
    set tags {}
    set extra {}
    foreach {k v} $options {
        switch -- $k {
            nodes { set nodes $v }
            timeout { set timeout $v }
            tags { set tags $v }
            args { set extra $v }
            default { error "cluster_block: unknown option '$k'" }
        }
    }
    if {[llength $::cluster(nodes)]} { error "cluster_block: blocks do not nest" }
    lappend tags cluster cluster-$kind
    if {$kind eq "mooncake"} { lappend tags mooncake }
    set saved_tags $::tags
    lappend ::tags {*}$tags
    set failed_before $::num_failed
    set ::cluster(kind) $kind
    set ::cluster(node_timeout) $timeout
    set ::cluster(name) "mctest-[pid]-[incr ::cluster(blocks)]"
    set ::cluster(extra_args) $extra

    set why $::skip_reason
    if {$why eq ""} { set why [__tags_skip_reason__ $::tags 0] }
    if {$why eq ""} { set why [__cluster_kind_missing__ $kind] }
    if {$why eq "" && $kind eq "mooncake"} {
        if {[catch {etcd_start} err opts]} {
            __report__ err "cluster_block $kind: starting etcd" $err
            set why "etcd did not start"
        }
    }
    if {$why eq ""} {
        if {[catch {cluster_start_nodes $nodes} err opts]} {
            set unsup [expr {$kind eq "mooncake" ? [__cluster_unsupported__ $err] : ""}]
            if {$unsup ne ""} {
                set why $unsup
                # Its refusal is the expected outcome here, not a failure.
                foreach id $::cluster(failed_ids) { set ::srvinfo($id,dead_ok) 1 }
                cluster_stop_all $::num_failed
            } else {
                __report__ err "cluster_block $kind: starting $nodes nodes" $err
                set why "the $kind nodes did not start"
                cluster_stop_all $failed_before
            }
        }
    }
    if {$why ne ""} {
        set saved_skip $::skip_reason
        set ::skip_reason $why
        catch {uplevel 1 $code}
        set ::skip_reason $saved_skip
        set ::tags $saved_tags
        if {$kind eq "mooncake"} { __etcd_cleanup__ $failed_before }
        return
    }

    set rc [catch {uplevel 1 $code} res opts]
    set ::tags $saved_tags
    cluster_stop_all $failed_before
    set ::cluster(kind) {}
    return -options $opts $res
}
