# The server's life: clean shutdown on SIGTERM and SHUTDOWN, daemonize with a
# pidfile, clear start-up errors for the pool's options, and the output
# buffer limit that protects it from clients that never read.

proc lifecycle_file_text {path} {
    if {![file exists $path]} { return "" }
    set f [open $path r]
    set t [read $f]
    close $f
    return $t
}

# A client asks for the 4 MiB value cob:big eight times and reads nothing;
# the server must close it for its output buffer (fails with why otherwise).
proc flood_until_closed {why} {
    set before [get_info_field r stats client_output_buffer_limit_disconnections]
    set c [redis_deferring_client]
    for {set i 0} {$i < 8} {incr i} { $c write [::redis::format_command get cob:big] }
    $c flush
    wait_for_condition 100 50 {
        [get_info_field r stats client_output_buffer_limit_disconnections] > $before
    } else {
        fail $why
    }
    catch {$c close}
}

start_server {tags {lifecycle}} {
    test {A client over the output buffer hard limit is closed, others are not} {
        r config set client-output-buffer-limit "normal 1mb 0 0"
        r set cob:big [string repeat x [expr {4*1024*1024}]]
        flood_until_closed "the client was not closed for its output buffer"
        r config set client-output-buffer-limit "normal 0 0 0"
        # The server and other clients carry on.
        assert_equal [expr {4*1024*1024}] [r strlen cob:big]
        r ping
    } {PONG}

    test {A client over the soft limit for longer than soft-seconds is closed} {
        r config set client-output-buffer-limit "normal 0 1mb 1"
        flood_until_closed "the client was not closed after soft-seconds over the soft limit"
        r config set client-output-buffer-limit "normal 0 0 0"
        r ping
    } {PONG}
}

start_server {tags {lifecycle}} {
    test {SIGTERM: the server logs, removes its unix socket and exits} {
        set pid [srv 0 pid]
        set sock [srv 0 unixsocket]
        assert {[file exists $sock]}
        kill_server
        assert {![process_is_alive $pid]}
        set log [lifecycle_file_text [srv 0 stdout]]
        assert_match {*ready to exit*} $log
        assert {![file exists $sock]}
    }
}

start_server {tags {lifecycle}} {
    test {SHUTDOWN closes the connection and the process exits} {
        catch {r shutdown}
        assert_equal 1 [server_exited]
        assert_match {*ready to exit*} [lifecycle_file_text [srv 0 stdout]]
    }
}

start_server {tags {lifecycle}} {
    test {SHUTDOWN ABORT with no shutdown in progress is an error} {
        assert_error {ERR*} {r shutdown abort}
        r ping
    } {PONG}
}

# Mooncake's own directives (and pool errors): not for redis-server.
tags {mooncake} {
    test {daemonize yes: the parent returns, the daemon writes its pidfile and serves} {
        set dir [tmpfile daemon]
        file mkdir $dir
        set port [find_available_port]
        set pidfile [file join $dir server.pid]
        set logfile [file join $dir server.log]
        # exec waits for the parent, which exits once the child is forked.
        exec $::harness(binary) --port $port --bind 127.0.0.1 --daemonize yes \
            --pidfile $pidfile --logfile $logfile --segment-size 16mb
        wait_for_condition 100 50 {[file exists $pidfile]} else { fail "no pidfile" }
        set pid [string trim [lifecycle_file_text $pidfile]]
        set c [::redis::redis 127.0.0.1 $port]
        wait_for_condition 100 50 {![catch {$c ping}]} else { fail "daemon does not answer" }
        assert_equal PONG [$c ping]
        catch {$c shutdown}
        catch {$c close}
        wait_for_condition 100 50 {![process_is_alive $pid]} else {
            catch {exec kill -9 $pid}
            fail "daemon did not exit"
        }
        assert {![file exists $pidfile]}
        assert_match {*Ready to accept connections*} [lifecycle_file_text $logfile]
        file delete -force $dir
    }

    test {A config file error names the file, the line and the reason} {
        lassign [run_conf_expecting_exit "port 0\n# a comment\nmaxclients lots"] exited out conf
        assert_equal 1 $exited
        assert_match "*$conf*line 3*maxclients lots*integer*" $out
    }

    test {segment-hugepages without reserved hugepages fails with a clear reason} {
        set nr [string trim [lifecycle_file_text /proc/sys/vm/nr_hugepages]]
        if {$nr ne "" && $nr > 0} {
            skip "this machine has hugepages reserved ($nr)"
        }
        set port [find_available_port]
        lassign [run_server_expecting_exit --port $port --bind 127.0.0.1 \
                     --segment-hugepages yes --segment-size 16mb] exited out
        assert_equal 1 $exited
        assert_match {*hugepage*} $out
    }

    test {segment-numa-node beyond the machine's nodes fails with a clear reason} {
        set port [find_available_port]
        lassign [run_server_expecting_exit --port $port --bind 127.0.0.1 \
                     --segment-numa-node 1000 --segment-size 16mb] exited out
        assert_equal 1 $exited
        assert_match {*segment-numa-node 1000*} $out
    }

    test {A port that is taken stops start-up with the reason} {
        set port [find_available_port]
        set holder [socket -server {apply {{c a p} {close $c}}} -myaddr 127.0.0.1 $port]
        lassign [run_server_expecting_exit --port $port --bind 127.0.0.1 --segment-size 16mb] exited out
        close $holder
        assert_equal 1 $exited
        assert_match "*$port*" $out
    }
}
