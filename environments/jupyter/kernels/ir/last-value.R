# SPDX-License-Identifier: MIT
# Sourced by the ir kernel before IRkernel::main() (kernel.json): the value
# of a cell's last top-level expression, when it is visible, is sent as an
# execute_result, as Python's kernel sends it, instead of the display_data
# IRkernel sends for every visible value; the values of earlier expressions
# stay display_data, in their place among the cell's outputs.
#
# A visible value's message is held back until the next thing the cell
# does: another expression's value, printed text, a message, an error, a
# display or a new plot mean it was not the last, and it goes out as
# display_data just before that output; the end of the cell (the cell's
# last plot or its execute_reply) sends it as execute_result. IRkernel's
# Executor methods are wrapped, not rewritten: a method missing from this
# IRkernel leaves the kernel as it was.
local({
    methods <- get("Executor", envir = asNamespace("IRkernel"))$def@refMethods
    needed <- c("execute", "handle_value", "handle_graphics", "send_plot")
    if (!all(vapply(needed, exists, logical(1), envir = methods, inherits = FALSE)))
        return(invisible())
    state <- new.env()
    state$pending <- NULL      # the held value's mimebundle (data, metadata)
    state$capture <- FALSE     # inside handle_value: its display_data is held
    state$send <- NULL         # IRkernel's send_response

    # sends the held value, as display_data or as the cell's execute_result
    state$release <- function(parent, as_result, count) {
        p <- state$pending
        if (is.null(p)) return(invisible())
        state$pending <- NULL
        if (as_result)
            state$send("execute_result", parent, "iopub", c(p, list(execution_count = count)))
        else
            state$send("display_data", parent, "iopub", p)
    }

    wrap <- function(name, make) {
        def <- get(name, envir = methods)
        def@.Data <- make(def@.Data)
        assign(name, def, envir = methods)
    }

    wrap("execute", function(orig) eval(bquote(function(request) {
        st <- .(state)
        o <- .(orig)
        environment(o) <- as.environment(.self)
        st$pending <- NULL
        st$capture <- FALSE
        st$send <- send_response
        on.exit({
            send_response <<- st$send
            st$pending <- NULL
            st$capture <- FALSE
        })
        send_response <<- function(msg_type, parent_msg, socket_name, content) {
            if (st$capture && msg_type == "display_data") {
                st$pending <- content
                return(invisible())
            }
            if (msg_type == "execute_reply")
                st$release(parent_msg, TRUE, content$execution_count)
            else if (socket_name == "iopub")
                st$release(parent_msg, FALSE)
            st$send(msg_type, parent_msg, socket_name, content)
        }
        o(request)
    })))

    wrap("handle_value", function(orig) eval(bquote(function(obj, visible) {
        st <- .(state)
        o <- .(orig)
        environment(o) <- as.environment(.self)
        st$release(current_request, FALSE)
        st$capture <- TRUE
        on.exit(st$capture <- FALSE)
        o(obj, visible)
    })))

    wrap("handle_graphics", function(orig) eval(bquote(function(plotobj) {
        st <- .(state)
        o <- .(orig)
        environment(o) <- as.environment(.self)
        st$release(current_request, FALSE)
        o(plotobj)
    })))

    # called during the cell only from handle_graphics (the value released
    # there already); at its end with the cell's last plot
    wrap("send_plot", function(orig) eval(bquote(function(plotobj) {
        st <- .(state)
        o <- .(orig)
        environment(o) <- as.environment(.self)
        st$release(current_request, TRUE, execution_count)
        o(plotobj)
    })))
})
