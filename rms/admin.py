from django.contrib import admin

from rms.models import ApiClient, MemoryObject, Namespace, Operation


@admin.register(Namespace)
class NamespaceAdmin(admin.ModelAdmin):
    list_display = ("name", "ignore_threshold", "relevance_threshold", "created_at")
    search_fields = ("name",)


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "created_at")
    list_filter = ("role",)
    exclude = ("token_hash",)
    filter_horizontal = ("namespaces",)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Objects change only through services (each change an operation); the log never changes."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MemoryObject)
class MemoryObjectAdmin(ReadOnlyAdmin):
    list_display = ("id", "namespace", "epistemic_type", "confidence", "pinned", "created_at")
    list_filter = ("namespace", "epistemic_type", "pinned")
    search_fields = ("content",)
    list_select_related = ("namespace",)


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ("seq", "ts", "op_type", "target_type", "target_id", "namespace", "actor_id")
    list_filter = ("op_type", "target_type", "namespace")
    search_fields = ("=target_id", "=session_id", "=hash")
    ordering = ("-seq",)
